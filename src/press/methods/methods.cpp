#include "press/methods/methods.h"

#include "press/methods/d2o.h"
#include "press/methods/gvote.h"
#include "press/methods/kvzip.h"
#include "press/methods/compactor.h"
#include "press/methods/uncomp.h"

namespace kvs {

// Each method declares `void add_<paper>_presses(std::vector<PressInfo>&)` (and, if it has one,
// `add_<paper>_allocators`) in its own header and is listed here, one line each.

void add_method_presses(std::vector<PressInfo>& presses) {
  add_d2o_presses(presses);
  add_gvote_presses(presses);
  add_kvzip_presses(presses);
  add_compactor_presses(presses);
  add_uncomp_presses(presses);
}

void add_method_allocators(std::vector<AllocatorInfo>& allocators) {
  add_d2o_allocators(allocators);
  add_gvote_allocators(allocators);
  add_kvzip_allocators(allocators);
  add_compactor_allocators(allocators);
  add_uncomp_allocators(allocators);
}

}  // namespace kvs
