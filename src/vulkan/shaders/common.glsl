// Shared by the compute shaders: the linear workgroup index of a 2-D dispatch (the host splits
// more than 65535 groups over y, ops.cpp dispatch_groups) and the power-of-two workgroup size,
// specialisation constant 0.
layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;

uint group_index() { return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x; }
