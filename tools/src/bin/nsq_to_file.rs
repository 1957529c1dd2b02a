//! `nsq_to_file`: see [`tools::archive`].

fn main() {
    std::process::exit(tools::archive::main());
}
