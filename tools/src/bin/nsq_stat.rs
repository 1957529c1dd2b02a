//! `nsq_stat`: see [`tools::stat`].

fn main() {
    std::process::exit(tools::stat::main());
}
