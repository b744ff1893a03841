//! One module per panel of the page. Each reads the state through [`crate::store::Store`].

pub mod compare;
pub mod kernel;
pub mod run_form;
pub mod runs;
pub mod selection;
pub mod summary;
