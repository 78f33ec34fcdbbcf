// The one translation unit that compiles Asio and Beast.
// Everything else is built with *_SEPARATE_COMPILATION and sees declarations only.
#include <boost/asio/impl/src.hpp>
#include <boost/asio/ssl/impl/src.hpp>
#include <boost/beast/src.hpp>
