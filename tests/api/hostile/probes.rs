//! The probes (`/metrics`, `/readyz`) and the shared board readers cost a client what they cost the server.
