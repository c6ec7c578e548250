// The one translation unit that compiles Beast (BOOST_BEAST_SEPARATE_COMPILATION), for the
// test fakes, the simulator and the replayer; the gateway speaks HTTP/1.1 without it.
#include <boost/beast/src.hpp>
