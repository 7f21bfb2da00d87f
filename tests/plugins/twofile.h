/* What the two files of devmm-twofile.so share. */
#pragma once
#include <devmm/plugin.h>

__attribute__((visibility("hidden"))) extern const devmm_resource_ops twofile_ops;
