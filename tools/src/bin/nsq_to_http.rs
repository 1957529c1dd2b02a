//! `nsq_to_http`: see [`tools::to_http`].

fn main() {
    std::process::exit(tools::to_http::main());
}
