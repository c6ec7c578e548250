// The one translation unit that compiles Asio's TLS layer (BOOST_ASIO_SEPARATE_COMPILATION),
// for what speaks TLS (the Kubernetes API client; tests' TLS peers).
#include <boost/asio/ssl/impl/src.hpp>
