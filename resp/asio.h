#pragma once
// The one place resp/ includes Boost.Asio (as nbd/asio.h does for nbd/:
// the servers do not include each other). Boost 1.74's awaitable.hpp uses
// std::exchange without including <utility>, so that comes first.

#include <utility>

#include <boost/asio.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/local/stream_protocol.hpp>

namespace ftl::resp {
namespace asio = boost::asio;
using Socket = asio::generic::stream_protocol::socket;
}  // namespace ftl::resp
