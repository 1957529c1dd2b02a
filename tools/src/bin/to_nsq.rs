//! `to_nsq`: see [`tools::publish`].

fn main() {
    std::process::exit(tools::publish::main());
}
