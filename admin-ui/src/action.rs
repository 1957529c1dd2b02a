//! What an operator asks admin-ui to do (a POST or DELETE of the JSON API): the routes
//! (`api.rs`) read it and do it, the audit (`audit.rs`) names it in notifications.

/// What a POST or DELETE asks for.
pub enum Action<'a> {
    Create(String, Option<String>),
    Topic(&'a str, &'static str),
    DeleteTopic(&'a str),
    Channel(&'a str, &'a str, &'static str),
    DeleteChannel(&'a str, &'a str),
    Tombstone(&'a str, String),
    /// A topic's own settings (its retention): `(name, value)` as the broker takes them.
    TopicConfig(&'a str, Settings),
    /// A channel's own settings (max attempts, dead-letter topic).
    ChannelConfig(&'a str, &'a str, Settings),
    /// A dead-letter topic's records published back (only the one with this ID when given).
    Redrive(&'a str, Option<String>),
    /// A channel rewound to a position (`timestamp` or `earliest`, as the broker takes it);
    /// with `dry_run`, only what it would deliver again.
    Rewind {
        topic: &'a str,
        channel: &'a str,
        position: (&'static str, String),
        dry_run: bool,
    },
}

/// A setting's broker argument name and its value.
pub type Settings = Vec<(&'static str, String)>;

impl Action<'_> {
    /// nsqadmin's name for it in notifications.
    pub fn name(&self) -> String {
        match self {
            Action::Create(_, None) => "create_topic".into(),
            Action::Create(_, Some(_)) => "create_channel".into(),
            Action::Topic(_, op) => format!("{op}_topic"),
            Action::DeleteTopic(_) => "delete_topic".into(),
            Action::Channel(_, _, op) => format!("{op}_channel"),
            Action::DeleteChannel(..) => "delete_channel".into(),
            Action::Tombstone(..) => "tombstone_topic_producer".into(),
            Action::TopicConfig(..) => "config_topic".into(),
            Action::ChannelConfig(..) => "config_channel".into(),
            Action::Redrive(..) => "redrive_topic".into(),
            Action::Rewind { .. } => "rewind_channel".into(),
        }
    }

    /// Its topic, channel and node.
    pub fn subject(&self) -> (&str, Option<&str>, Option<&str>) {
        match self {
            Action::Create(t, c) => (t, c.as_deref(), None),
            Action::Topic(t, _)
            | Action::DeleteTopic(t)
            | Action::TopicConfig(t, _)
            | Action::Redrive(t, _) => (t, None, None),
            Action::Channel(t, c, _)
            | Action::DeleteChannel(t, c)
            | Action::ChannelConfig(t, c, _)
            | Action::Rewind {
                topic: t,
                channel: c,
                ..
            } => (t, Some(c), None),
            Action::Tombstone(n, t) => (t, None, Some(n)),
        }
    }
}
