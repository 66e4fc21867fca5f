#include "press/methods/methods.h"

namespace kvs {

// Each method declares `void add_<paper>_presses(std::vector<PressInfo>&)` (and, if it has one,
// `add_<paper>_allocators`) in its own header and is listed here, one line each.

void add_method_presses(std::vector<PressInfo>& presses) { (void)presses; }

void add_method_allocators(std::vector<AllocatorInfo>& allocators) { (void)allocators; }

}  // namespace kvs
