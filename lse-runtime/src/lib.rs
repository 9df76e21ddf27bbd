//! LSE runtime.
