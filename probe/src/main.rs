use ackscope_probe::serve::assets::{self, Asset};

// `ASSETS`: the web app's files, listed by build.rs. Included here, not in the library, so that
// a rebuilt web app costs a relink of this file only.
include!(concat!(env!("OUT_DIR"), "/assets.rs"));

fn main() -> std::process::ExitCode {
    assets::install(ASSETS);
    ackscope_probe::cli::main()
}
