// File: store/store_metrics.h
// The pages of kvgate-store's HTTP listener: Prometheus metrics (kvgate_store_*, and the data
// node's kvgate_transfer_* counters) and the /admin/store JSON, from whichever roles this
// process runs. Pure functions of the roles' snapshots; thread-safe.
#pragma once

#include <string>

#include "store/data_node.h"
#include "store/master_service.h"

namespace kvgate::store {

/// Either pointer may be null (a data-only or master-only process).
std::string RenderMetrics(const MasterService* master, DataNode* node);
std::string RenderAdminJson(const MasterService* master, const DataNode* node);

}  // namespace kvgate::store
