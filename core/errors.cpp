#include "core/errors.h"

#include "core/display_text.h"

namespace bitparity {

int RunMappingErrors(const std::function<int()>& body, std::ostream& err, int internal_error_exit) {
  try {
    return body();
  } catch (const InputError& e) {
    err << "error: " << EscapedText(e.what(), /*keep_whitespace=*/true) << std::endl;
    return kExitBadInput;
  } catch (const InfrastructureError& e) {
    err << "infrastructure error: " << EscapedText(e.what(), /*keep_whitespace=*/true) << std::endl;
    return kExitInfrastructure;
  } catch (const std::exception& e) {
    err << "internal error: " << EscapedText(e.what(), /*keep_whitespace=*/true) << std::endl;
    return internal_error_exit;
  }
}

}  // namespace bitparity
