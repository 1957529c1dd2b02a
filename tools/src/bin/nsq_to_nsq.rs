//! `nsq_to_nsq`: see [`tools::relay`].

fn main() {
    std::process::exit(tools::relay::main());
}
