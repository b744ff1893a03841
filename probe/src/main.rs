fn main() -> std::process::ExitCode {
    ackscope_probe::cli::main()
}
