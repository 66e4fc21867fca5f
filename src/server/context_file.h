// Stored contexts as .kvc files (kvcache/cache_file.h). The header carries the same fields as
// `kvshrink compress` writes (model identity, press and parameters, keep ratios, press state,
// full size; see runtime/kvc_meta.h), so `kvshrink ask DIR/<id>.kvc "question"` answers from a
// context the server made, plus a "server" object: the id, creation time, format ("text" or
// "chat") and the chat roles. Loading checks every field it uses (types, ranges, the model's
// fingerprint, the press and options through make_compression_spec) before trusting it.
#pragma once
#include <nlohmann/json.hpp>

#include <string>

#include "model/model.h"
#include "runtime/engine.h"
#include "server/context_store.h"

namespace kvs::server {

class KvcContextCodec : public ContextCodec {
 public:
  KvcContextCodec(Engine& engine, const Model& model) : engine_(engine), model_(model) {}
  void save(const ServedContext& c, const std::string& path) override;
  std::shared_ptr<ServedContext> load(const std::string& path, const std::string& id) override;
  std::vector<uint8_t> encode(const ServedContext& c) const override;
  // `name` names the bytes in errors (the Redis key, the file).
  std::shared_ptr<ServedContext> decode(const uint8_t* data, size_t n, const std::string& name,
                                        const std::string& id) override;
  size_t load_bytes_bound(const std::string& path) override;
  ContextInfo describe(const std::string& path, const std::string& id) override;
  size_t kv_room() const override;

  // The header written for `c` (without the layout fields save_cache adds).
  nlohmann::json header(const ServedContext& c) const;

 private:
  Engine& engine_;
  const Model& model_;
};

}  // namespace kvs::server
