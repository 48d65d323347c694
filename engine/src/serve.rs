//! The server loop every parameter server shares: receive, dispatch, stop at shutdown, report.
//!
//! A server is written as a [`ServerHandler`]: what to do with one message, and what to report at
//! the end. [`serve`] owns the rest — the receive loop, the engine's shutdown, and the uniform
//! error for a message the handler does not expect — so a strategy's server holds only its
//! protocol.

use crate::context::RoleContext;
use crate::contract::ServerReport;
use crate::error::{EngineError, Result};
use crate::message::Message;
use crate::transport::Envelope;
use async_trait::async_trait;

/// A server's protocol, run by [`serve`].
///
/// ```
/// use concord_engine::prelude::*;
/// use concord_engine::serve::{serve, unexpected, ServerHandler};
///
/// /// A server that holds nothing and accepts no message.
/// struct Empty;
///
/// #[async_trait]
/// impl ServerHandler for Empty {
///     async fn handle(&mut self, ctx: &mut RoleContext, env: Envelope) -> Result<()> {
///         Err(unexpected(ctx, &env))
///     }
///     fn finish(&mut self, _ctx: &mut RoleContext) -> Result<ServerReport> {
///         Ok(ServerReport::default())
///     }
/// }
///
/// #[async_trait]
/// impl Server for Empty {
///     async fn run(&mut self, ctx: &mut RoleContext) -> Result<ServerReport> {
///         serve(self, ctx).await
///     }
/// }
/// ```
#[async_trait]
pub trait ServerHandler: Send {
    /// Handles one message; the engine's shutdown never reaches it.
    async fn handle(&mut self, ctx: &mut RoleContext, env: Envelope) -> Result<()>;
    /// What the server reports once it is shut down.
    fn finish(&mut self, ctx: &mut RoleContext) -> Result<ServerReport>;
    /// The run time at which the server acts without a message (a start-up ending, a timer),
    /// through [`ServerHandler::wake`]; `None`, the default: only messages wake it. The server
    /// waits for it in [`serve`]'s receive loop, not asleep in a handler: a sleeping role would
    /// hold a checkpoint's cut, and its peers' restart times, until it woke.
    fn wake_at(&self) -> Option<f64> {
        None
    }
    /// Acts at the time [`ServerHandler::wake_at`] named.
    async fn wake(&mut self, _ctx: &mut RoleContext) -> Result<()> {
        Ok(())
    }
}

/// Runs `handler` until the engine's shutdown (waking it when it asks), then returns its report.
pub async fn serve<H: ServerHandler + ?Sized>(
    handler: &mut H,
    ctx: &mut RoleContext,
) -> Result<ServerReport> {
    loop {
        let env = match handler.wake_at() {
            None => ctx.recv().await?,
            Some(at) => match ctx.recv_until(at).await? {
                Some(env) => env,
                None => {
                    handler.wake(ctx).await?;
                    continue;
                }
            },
        };
        if matches!(env.msg, Message::Shutdown) {
            return handler.finish(ctx);
        }
        handler.handle(ctx, env).await?;
    }
}

/// The protocol error for a message a role does not expect, naming the sender and the message.
pub fn unexpected(ctx: &RoleContext, env: &Envelope) -> EngineError {
    let what = match &env.msg {
        Message::Custom(m) => format!("`{}` message", m.tag),
        other => format!("message {other:?}"),
    };
    EngineError::protocol(ctx.id(), format!("unexpected {what} from {}", env.from))
}
