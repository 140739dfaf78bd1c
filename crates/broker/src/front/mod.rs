//! The front end: the listeners and their connections, for syncline's
//! protocol and Kafka's, and the metrics endpoint. It reads requests, bounds
//! what a connection may hold, runs the SASL exchange, and hands each request
//! with its [`Responder`](crate::responder::Responder) to the broker through
//! [`Dispatch`], the one thing it knows of what lies behind.
//!
//! - `listener`: accepts connections within the connection limits;
//! - `syncline`, `kafka`: each protocol's connection loop;
//! - `connection`: what both share (TLS, frames, SASL);
//! - `limits`: requests in flight, fetch response bytes, open connections,
//!   heavy work off the I/O runtime;
//! - `dispatch`: the seam to the broker;
//! - `http`: `GET /metrics`.

mod connection;
mod dispatch;
pub(crate) mod http;
mod kafka;
mod limits;
mod listener;
mod syncline;

pub(crate) use dispatch::Dispatch;
pub(crate) use limits::{ConnectionLimits, HeavyWork};
pub(crate) use listener::serve;
