//! `broker`: an NSQ-compatible message broker (a drop-in nsqd). Everything is in the library;
//! see `broker::run` and ARCHITECTURE.md.

fn main() -> std::process::ExitCode {
    broker::run()
}
