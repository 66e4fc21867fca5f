// Python bindings (pybind11) of the public C++ API: the extension module kvshrink._kvshrink,
// re-exported by python/kvshrink/__init__.py. Engine errors arrive as kvshrink.Error (a
// RuntimeError) with the engine's message. The GIL is held during calls: a model and its contexts
// share one engine, which runs one call at a time.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "kvshrink/kvshrink.h"

namespace py = pybind11;
using namespace pybind11::literals;

namespace {

// str, bytes or os.PathLike -> path string.
std::string fspath(const py::handle& p) {
  return py::str(py::module_::import("os").attr("fspath")(p)).cast<std::string>();
}

// Press option values as the engine reads them: booleans as true/false, the rest as str().
std::string option_value(const py::handle& v) {
  if (py::isinstance<py::bool_>(v)) return v.cast<bool>() ? "true" : "false";
  return py::str(v).cast<std::string>();
}

std::optional<double> opt_double(const py::object& o, const char* name) {
  if (o.is_none()) return std::nullopt;
  if (py::isinstance<py::str>(o)) {
    const std::string s = o.cast<std::string>();
    if (s == "auto" || s.empty()) return std::nullopt;
    throw kvshrink::Error(std::string(name) + " must be a number or 'auto', got '" + s + "'");
  }
  return o.cast<double>();
}

kvshrink::CompressOptions compress_options(const std::string& press, const py::object& keep, const py::object& quality,
                                           int budget, int sinks, int window, const std::string& trigger, uint64_t seed,
                                           bool chat, const std::string& question_template, bool scores,
                                           const py::kwargs& options) {
  kvshrink::CompressOptions o;
  o.press = press;
  o.keep = opt_double(keep, "keep");
  o.quality = opt_double(quality, "quality");
  o.budget = budget;
  o.sinks = sinks;
  o.window = window;
  o.trigger = trigger;
  o.seed = seed;
  o.chat = chat;
  o.question_template = question_template;
  o.keep_scores = scores;
  for (const auto& [k, v] : options) o.options[py::str(k).cast<std::string>()] = option_value(v);
  return o;
}

template <typename T>
T sampling(int max_new_tokens, float temperature, int top_k, float top_p, float min_p, uint64_t seed,
           const std::vector<std::string>& stop, bool stop_at_eog) {
  T s;
  s.max_new_tokens = max_new_tokens;
  s.temperature = temperature;
  s.top_k = top_k;
  s.top_p = top_p;
  s.min_p = min_p;
  s.seed = seed;
  s.stop = stop;
  s.stop_at_eog = stop_at_eog;
  return s;
}

py::dict options_dict(const kvshrink::CompressOptions& o) {
  py::dict d("press"_a = o.press, "keep"_a = o.keep, "quality"_a = o.quality, "budget"_a = o.budget,
             "sinks"_a = o.sinks, "window"_a = o.window, "trigger"_a = o.trigger, "seed"_a = o.seed,
             "chat"_a = o.chat, "question_template"_a = o.question_template);
  d["options"] = o.options;
  return d;
}

template <typename T>
py::array_t<T> to_numpy(const std::vector<T>& v) {
  py::array_t<T> a(static_cast<py::ssize_t>(v.size()));
  std::copy(v.begin(), v.end(), a.mutable_data());
  return a;
}

// Runs fn without the GIL (engine calls: other Python threads run meanwhile; the API's model lock
// serialises calls on one engine). fn must not touch Python objects: convert arguments before.
template <typename Fn>
auto nogil(Fn&& fn) -> decltype(fn()) {
  py::gil_scoped_release release;
  return fn();
}

// Keyword arguments shared by generate and ask.
#define KVS_SAMPLING_ARGS                                                                                  \
  py::kw_only(), "max_new_tokens"_a = 64, "temperature"_a = 0.0f, "top_k"_a = 40, "top_p"_a = 0.95f,        \
      "min_p"_a = 0.0f, "seed"_a = 0, "stop"_a = std::vector<std::string>{}, "stop_at_eog"_a = true

}  // namespace

PYBIND11_MODULE(_kvshrink, m) {
  m.doc() = "kvshrink: LLM inference with a compressible KV cache";
  py::register_exception<kvshrink::Error>(m, "Error", PyExc_RuntimeError);
  m.attr("__version__") = kvshrink::version();

  py::class_<kvshrink::Answer>(m, "Answer", "An answer with its tokens and timings (ask(..., details=True))")
      .def_readonly("text", &kvshrink::Answer::text)
      .def_readonly("tokens", &kvshrink::Answer::tokens)
      .def_readonly("prefill_seconds", &kvshrink::Answer::prefill_seconds)
      .def_readonly("decode_seconds", &kvshrink::Answer::decode_seconds)
      .def_readonly("compress_seconds", &kvshrink::Answer::compress_seconds)
      .def_readonly("kv_bytes_peak", &kvshrink::Answer::kv_bytes_peak)
      .def("__str__", [](const kvshrink::Answer& a) { return a.text; })
      .def("__repr__", [](const kvshrink::Answer& a) { return "<kvshrink.Answer " + py::repr(py::str(a.text)).cast<std::string>() + ">"; });

  py::class_<kvshrink::PressParam>(m, "PressParam")
      .def_readonly("name", &kvshrink::PressParam::name)
      .def_readonly("default", &kvshrink::PressParam::default_value)
      .def_readonly("doc", &kvshrink::PressParam::doc)
      .def("__repr__", [](const kvshrink::PressParam& p) { return "<kvshrink.PressParam " + p.name + "=" + p.default_value + ">"; });
  py::class_<kvshrink::PressDescription>(m, "PressDescription", "A press as `kvshrink presses` lists it")
      .def_readonly("name", &kvshrink::PressDescription::name)
      .def_readonly("description", &kvshrink::PressDescription::description)
      .def_readonly("paper", &kvshrink::PressDescription::paper)
      .def_readonly("default_sinks", &kvshrink::PressDescription::default_sinks)
      .def_readonly("default_window", &kvshrink::PressDescription::default_window)
      .def_readonly("default_trigger", &kvshrink::PressDescription::default_trigger)
      .def_readonly("default_allocator", &kvshrink::PressDescription::default_allocator)
      .def_readonly("params", &kvshrink::PressDescription::params)
      .def("__repr__", [](const kvshrink::PressDescription& p) { return "<kvshrink.PressDescription " + p.name + ">"; });
  py::class_<kvshrink::AllocatorDescription>(m, "AllocatorDescription")
      .def_readonly("name", &kvshrink::AllocatorDescription::name)
      .def_readonly("description", &kvshrink::AllocatorDescription::description)
      .def_readonly("params", &kvshrink::AllocatorDescription::params)
      .def("__repr__", [](const kvshrink::AllocatorDescription& a) { return "<kvshrink.AllocatorDescription " + a.name + ">"; });
  m.def("presses", &kvshrink::presses, "The compression methods (name, description, paper, options)");
  m.def("allocators", &kvshrink::allocators, "Budget allocators usable with any scoring press (allocator=NAME)");

  py::class_<kvshrink::Context>(m, "Context", "A prefilled (usually compressed) context")
      .def(
          "ask",
          [](kvshrink::Context& c, const std::string& q, int max_new_tokens, float temperature, int top_k, float top_p,
             float min_p, uint64_t seed, const std::vector<std::string>& stop, bool stop_at_eog, bool query_aware,
             bool details) -> py::object {
            auto o = sampling<kvshrink::AskOptions>(max_new_tokens, temperature, top_k, top_p, min_p, seed, stop, stop_at_eog);
            o.query_aware = query_aware;
            kvshrink::Answer a = nogil([&] { return c.ask(q, o); });
            if (details) return py::cast(std::move(a));
            return py::str(a.text);
          },
          "question"_a, KVS_SAMPLING_ARGS, "query_aware"_a = false, "details"_a = false,
          "Answers on a fork of the context (left unchanged); returns the text, or an Answer with details=True")
      .def(
          "compress",
          [](const kvshrink::Context& c, const std::string& press, const py::object& keep, const py::object& quality,
             int budget, int sinks, int window, const std::string& trigger, uint64_t seed, const std::string& question_template,
             bool scores, const py::kwargs& options) {
            const auto o = compress_options(press, keep, quality, budget, sinks, window, trigger, seed, c.options().chat,
                                            question_template, scores, options);
            return nogil([&] { return c.compress(o); });
          },
          "press"_a = "full", py::kw_only(), "keep"_a = py::none(), "quality"_a = py::none(), "budget"_a = 0, "sinks"_a = -1,
          "window"_a = -1, "trigger"_a = "", "seed"_a = 0, "question_template"_a = "", "scores"_a = false,
          "A compressed copy of this uncompressed context (from Model.prefill); other keywords are press options")
      .def("save",
           [](const kvshrink::Context& c, const py::object& path) {
             const std::string p = fspath(path);
             nogil([&] { c.save(p); });
           },
           "path"_a,
           "Writes a .kvc file (kvshrink.load / `kvshrink ask` read it)")
      .def("kept_positions", [](const kvshrink::Context& c, int layer, int head) { return to_numpy(c.kept_positions(layer, head)); },
           "layer"_a, "head"_a, "Context positions KV head `head` of `layer` holds (int32, increasing)")
      .def("scores", [](const kvshrink::Context& c, int layer, int head) { return to_numpy(c.scores(layer, head)); },
           "layer"_a, "head"_a, "The press's score of every context position (float32, NaN where none); needs scores=True")
      .def_property_readonly("has_scores", &kvshrink::Context::has_scores)
      .def_property_readonly("n_layer", &kvshrink::Context::n_layer)
      .def_property_readonly("n_head_kv", &kvshrink::Context::n_head_kv)
      .def_property_readonly("context_tokens", &kvshrink::Context::context_tokens)
      .def_property_readonly("keep_measured", &kvshrink::Context::keep_measured)
      .def_property_readonly("keep_chosen", &kvshrink::Context::keep_chosen)
      .def_property_readonly("kv_bytes", &kvshrink::Context::kv_bytes)
      .def_property_readonly("full_kv_bytes", &kvshrink::Context::full_kv_bytes)
      .def_property_readonly("options", [](const kvshrink::Context& c) { return options_dict(c.options()); })
      .def("__repr__", [](const kvshrink::Context& c) {
        return "<kvshrink.Context press=" + c.options().press + " tokens=" + std::to_string(c.context_tokens()) +
               " kept=" + py::str(py::float_(c.keep_measured())).cast<std::string>() + ">";
      });

  py::class_<kvshrink::Model>(m, "Model", "A loaded model (GGUF file or Hugging Face folder) and its engine")
      .def(py::init([](const py::object& path, int threads, const std::string& kv_type, int page_tokens, int batch) {
             kvshrink::ModelOptions o;
             o.threads = threads;
             o.kv_type = kv_type;
             o.page_tokens = page_tokens;
             o.batch = batch;
             const std::string p = fspath(path);
             return nogil([&] { return kvshrink::Model(p, o); });
           }),
           "path"_a, py::kw_only(), "threads"_a = 0, "kv_type"_a = "f16", "page_tokens"_a = 32, "batch"_a = 512)
      .def_property_readonly("info",
                             [](const kvshrink::Model& mo) {
                               const kvshrink::ModelInfo i = mo.info();
                               return py::dict("name"_a = i.name, "path"_a = i.path, "arch"_a = i.arch, "n_vocab"_a = i.n_vocab,
                                               "n_embd"_a = i.n_embd, "n_layer"_a = i.n_layer, "n_head"_a = i.n_head,
                                               "n_head_kv"_a = i.n_head_kv, "head_dim"_a = i.head_dim,
                                               "n_ctx_train"_a = i.n_ctx_train);
                             })
      .def("tokenize", &kvshrink::Model::tokenize, "text"_a, "add_bos"_a = true)
      .def("detokenize", &kvshrink::Model::detokenize, "tokens"_a)
      .def(
          "generate",
          [](kvshrink::Model& mo, const std::string& prompt, int max_new_tokens, float temperature, int top_k, float top_p,
             float min_p, uint64_t seed, const std::vector<std::string>& stop, bool stop_at_eog, bool chat,
             const std::string& system, bool details) -> py::object {
            auto o = sampling<kvshrink::GenerateOptions>(max_new_tokens, temperature, top_k, top_p, min_p, seed, stop, stop_at_eog);
            o.chat = chat;
            o.system = system;
            kvshrink::Answer a = nogil([&] { return mo.generate(prompt, o); });
            if (details) return py::cast(std::move(a));
            return py::str(a.text);
          },
          "prompt"_a, KVS_SAMPLING_ARGS, "chat"_a = false, "system"_a = "", "details"_a = false,
          "Completes the prompt with a full cache; returns the new text (an Answer with details=True)")
      .def(
          "prefill",
          [](kvshrink::Model& mo, const std::string& text, const py::object& prepare, bool chat) {
            std::vector<kvshrink::CompressOptions> prep;
            if (!prepare.is_none())
              for (const auto& p : prepare) {
                kvshrink::CompressOptions o;
                o.press = py::str(p).cast<std::string>();
                prep.push_back(o);
              }
            return nogil([&] { return mo.prefill(text, prep, chat); });
          },
          "text"_a, py::kw_only(), "prepare"_a = py::none(), "chat"_a = false,
          "Prefills a context uncompressed; Context.compress then derives compressed contexts from it. prepare: press "
          "names whose statistics to collect now")
      .def(
          "compress",
          [](kvshrink::Model& mo, const std::string& text, const std::string& press, const py::object& keep,
             const py::object& quality, int budget, int sinks, int window, const std::string& trigger, uint64_t seed,
             bool chat, const std::string& question_template, bool scores, const py::kwargs& options) {
            const auto o = compress_options(press, keep, quality, budget, sinks, window, trigger, seed, chat,
                                            question_template, scores, options);
            return nogil([&] { return mo.compress(text, o); });
          },
          "text"_a, "press"_a = "full", py::kw_only(), "keep"_a = py::none(), "quality"_a = py::none(), "budget"_a = 0,
          "sinks"_a = -1, "window"_a = -1, "trigger"_a = "", "seed"_a = 0, "chat"_a = false, "question_template"_a = "",
          "scores"_a = false, "Prefills and compresses a context (kvshrink compress); other keywords are press options")
      .def("load",
           [](kvshrink::Model& mo, const py::object& path) {
             const std::string p = fspath(path);
             return nogil([&] { return mo.load(p); });
           },
           "path"_a,
           "Loads a .kvc file made with this model");

  m.def("load",
        [](const py::object& path, kvshrink::Model& mo) {
          const std::string p = fspath(path);
          return nogil([&] { return mo.load(p); });
        },
        "path"_a, "model"_a,
        "Loads a .kvc file made with `model` (same as model.load(path))");
}
