//! Claims, subjects, key sets and secrets that must not be trusted as they come; writes acknowledged only once announced.
