//! What a connection's client is, as IDENTIFY, AUTH and the TLS handshake settled it: what
//! /stats shows of it, and what AUTH tells the auth servers.
//!
//! Invariants: the reader's session holds the client's info and publishes every change here
//! ([`Identity::show`]) before it answers the command that made it; the TLS state is set once,
//! by the TLS layer's handshake, and never unset.

use crate::channel::{ClientAuth, ClientInfo};
use std::cell::{Cell, Ref, RefCell};
use std::sync::Arc;

/// A connection's client, as the rest of the shard sees it.
#[derive(Default)]
pub(super) struct Identity {
    /// Who the client says it is, for /stats.
    info: RefCell<ClientInfo>,
    /// Whether the connection runs over TLS, and the common name of the client's certificate
    /// ("" without one): sent to the auth servers by AUTH.
    tls: Cell<bool>,
    tls_common_name: RefCell<String>,
}

impl Identity {
    /// Shows `info` from now on.
    pub(super) fn show(&self, info: &ClientInfo) {
        *self.info.borrow_mut() = info.clone();
    }

    /// Shows the auth servers' answer from now on.
    pub(super) fn show_auth(&self, auth: Arc<ClientAuth>) {
        self.info.borrow_mut().auth = Some(auth);
    }

    /// What is shown of the client.
    pub(super) fn info(&self) -> Ref<'_, ClientInfo> {
        self.info.borrow()
    }

    /// The TLS handshake is done; `common_name`: the client certificate's ("" without one).
    pub(super) fn tls_on(&self, common_name: String) {
        self.tls.set(true);
        *self.tls_common_name.borrow_mut() = common_name;
    }

    /// Whether the connection runs over TLS.
    pub(super) fn over_tls(&self) -> bool {
        self.tls.get()
    }

    /// The common name of the client's certificate ("" without one).
    pub(super) fn common_name(&self) -> Ref<'_, String> {
        self.tls_common_name.borrow()
    }
}
