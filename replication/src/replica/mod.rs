//! One topic's replica on one broker, as its leader or a follower: the data path of
//! docs/design/replication.md. Being built.
