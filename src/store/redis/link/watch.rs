//! The watch of a connection's disconnects: receives its push messages, and on the
//! server's `Disconnection` runs the callback it was made with (the slot retires the
//! connection at once, before a request writes to a connection its server has already
//! closed). It knows nothing of slots.

use redis::aio::{AsyncPushSender, SendError as PushSendError};
use redis::{PushInfo, PushKind};

/// Receives a connection's push messages: `Disconnection` runs `on_close`.
pub(super) struct DisconnectWatch {
    on_close: Box<dyn Fn() + Send + Sync>,
}

impl DisconnectWatch {
    /// `on_close` is called from the connection's reader: it must only take short locks and
    /// spawn what takes longer.
    pub(super) fn new(on_close: impl Fn() + Send + Sync + 'static) -> DisconnectWatch {
        DisconnectWatch { on_close: Box::new(on_close) }
    }
}

impl AsyncPushSender for DisconnectWatch {
    fn send(&self, info: PushInfo) -> Result<(), PushSendError> {
        if info.kind == PushKind::Disconnection {
            (self.on_close)();
        }
        Ok(())
    }
}
