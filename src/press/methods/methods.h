// The seed methods (one file per paper in this folder: kvzip, compactor, d2o, gvote, uncomp) add
// their presses and allocators to the registry here, so that registry.cpp stays the baselines'
// table and each method lives in its own files.
#pragma once
#include <vector>

#include "press/registry.h"

namespace kvs {

// Appends every seed method's presses / allocators (called once by the registry).
void add_method_presses(std::vector<PressInfo>& presses);
void add_method_allocators(std::vector<AllocatorInfo>& allocators);

}  // namespace kvs
