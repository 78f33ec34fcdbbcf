// The composition root: the one place that knows the backends' types. Adding
// a backend is a folder under adapters/, a config struct in
// include/tjob/backends.hpp, and a case here (docs/architecture.md).
#include "adapters/container/container_backend.hpp"
#include "adapters/kubernetes/kube_backend.hpp"
#include "adapters/local/local_backend.hpp"
#include "adapters/remote/remote_backend.hpp"
#include "engine/backend.hpp"

#include <tjob/error.hpp>

namespace tjob::detail {

std::shared_ptr<backend> make_backend(backend_context ctx) {
  switch (ctx.cfg.backend) {
    case backend_kind::local:
      return std::make_shared<local::backend>(std::move(ctx));
    case backend_kind::container:
      return std::make_shared<container::backend>(std::move(ctx));
    case backend_kind::kubernetes:
      return std::make_shared<kube::backend>(std::move(ctx));
    case backend_kind::remote:
      return std::make_shared<remote::backend>(std::move(ctx));
  }
  throw error(errc::invalid_argument, "unknown backend kind " +
                                          std::to_string(static_cast<int>(ctx.cfg.backend)) +
                                          "; use local, container, kubernetes or remote");
}

}  // namespace tjob::detail
