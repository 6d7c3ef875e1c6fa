//! What a document costs is charged by its size, and trusted documents.
