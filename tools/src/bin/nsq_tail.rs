//! `nsq_tail`: see [`tools::tail`].

fn main() {
    std::process::exit(tools::tail::main());
}
