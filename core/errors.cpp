#include "core/errors.h"

namespace bitparity {

int RunMappingErrors(const std::function<int()>& body, std::ostream& err, int internal_error_exit) {
  try {
    return body();
  } catch (const InputError& e) {
    err << "error: " << e.what() << std::endl;
    return kExitBadInput;
  } catch (const InfrastructureError& e) {
    err << "infrastructure error: " << e.what() << std::endl;
    return kExitInfrastructure;
  } catch (const std::exception& e) {
    err << "internal error: " << e.what() << std::endl;
    return internal_error_exit;
  }
}

}  // namespace bitparity
