// File: tests/store/test_credentials.h
// One credentials file per test process (transfer/peer_auth.h), in a temp dir, named by
// $KVGATE_STORE_CREDENTIALS so that in-process clients and child kvgate-store processes use it:
//   node     node      *            any data node name
//   client   default   *            every namespace
//   client   tenant-a  a|*          namespaces of model "a"
//   client   tenant-b  b|*          namespaces of model "b"
#pragma once

#include <string>

#include "transfer/peer_auth.h"

namespace kvgate::testing {

/// Writes the file on first use and exports its path. Thread-compatible (call from the test
/// thread).
const std::string& TestCredentialsFile();

/// The PeerAuth of `role` with credential `name` (empty: the first of the role) from it.
transfer::PeerAuthPtr TestAuth(transfer::PeerRole role, const std::string& name = "");

}  // namespace kvgate::testing
