// Debian's libgloo-dev (0.0~git20220518) installs gloo/transport/tcp/context.h
// but not the gloo/common/memory.h it includes. The plugin only needs the
// tcp::Context class declaration (to abort a context), which uses these
// pointer templates in the types of private members, so declarations are
// enough. Searched after the system include path (-idirafter): a gloo that
// ships the real header uses it.
#pragma once

namespace gloo {

template <typename T>
class NonOwningPtr;
template <typename T>
class WeakNonOwningPtr;
template <typename T>
class ShareableNonOwningPtr;

}  // namespace gloo
