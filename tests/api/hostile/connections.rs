//! Connection slots, deadlines and header buffers: one client cannot hold what others need.
