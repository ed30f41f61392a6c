//! Property tests of the virtual-memory core against a model of page contents.
