//! The broker's lifecycle with the controller as a pure state machine: register,
//! heartbeat while fenced and then unfenced, register again when the controller
//! no longer knows the registration, and on shutdown ask the controller to move
//! leadership away (controlled shutdown). No I/O, no clock: `now` comes in with
//! every event, and each step says what to publish and what to do next; the task
//! in the broker's `controller_client` executes it.
//!
//! ```text
//!  Registering ──registered──► Fenced ◄──heartbeat: fenced──┐
//!    ▲  │ ▲                      │                           │
//!    │  │ └─ pause, retry        └──heartbeat: unfenced──► Unfenced
//!    │  └─ failed                                            │
//!    └──── STALE_BROKER_EPOCH / BROKER_ID_NOT_REGISTERED ────┘ (from either)
//!
//!  shutdown: Registering ─► Stopped;  Fenced/Unfenced ─► ShuttingDown (controlled
//!  shutdown on) or Stopped;  ShuttingDown ─► Stopped when leadership moved, on an
//!  error, when the controller is unreachable, or at the deadline.
//! ```

use std::time::{Duration, Instant};

use syncline_proto::ErrorCode;

/// Heartbeat interval while fenced (catching up with metadata): the controller
/// unfences a broker as soon as a heartbeat shows it has caught up.
pub const FENCED_HEARTBEAT_INTERVAL: Duration = Duration::from_millis(100);
/// Longest pause between two failed registrations.
pub const MAX_REGISTRATION_RETRY: Duration = Duration::from_secs(1);
/// Pause between two controlled-shutdown heartbeats.
pub const SHUTDOWN_HEARTBEAT_INTERVAL: Duration = Duration::from_millis(100);

/// What the lifecycle task reports about this broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BrokerStatus {
    /// The epoch of the current registration (0 before the first).
    pub broker_epoch: i64,
    /// Whether the controller keeps this broker out of leadership and ISRs.
    pub fenced: bool,
}

/// The lifecycle's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LifecycleConfig {
    /// `broker_heartbeat_interval_ms`.
    pub heartbeat_interval: Duration,
    /// `controlled_shutdown_timeout_ms` if `controlled_shutdown_enable`.
    pub controlled_shutdown_timeout: Option<Duration>,
}

/// Where the broker stands with the controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Not registered (or the controller forgot the registration): registering.
    Registering,
    /// Registered in `broker_epoch`, kept out of leadership until caught up.
    Fenced {
        /// The registration's epoch.
        broker_epoch: i64,
    },
    /// Registered in `broker_epoch` and serving.
    Unfenced {
        /// The registration's epoch.
        broker_epoch: i64,
    },
    /// Asking the controller to move leadership away, until `deadline`.
    ShuttingDown {
        /// The registration's epoch.
        broker_epoch: i64,
        /// When to give up waiting.
        deadline: Instant,
    },
    /// Done.
    Stopped,
}

/// A heartbeat's outcome, as the shell reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeartbeatAnswer {
    /// Answered without error.
    Ok {
        /// The controller fences this broker.
        is_fenced: bool,
        /// Leadership has moved away: the broker may stop (controlled shutdown).
        should_shutdown: bool,
    },
    /// Answered with an error code.
    Error(ErrorCode),
    /// Answered with something else than a heartbeat response.
    Unexpected,
    /// No answer (cannot connect, connection lost, timed out).
    Unreachable,
}

/// What happened, as the shell reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The registration was accepted in `broker_epoch`.
    Registered {
        /// The new registration's epoch.
        broker_epoch: i64,
    },
    /// The registration failed (refused or unanswered).
    RegistrationFailed,
    /// The heartbeat asked for by [`Action::Heartbeat`] ended so.
    Heartbeat(HeartbeatAnswer),
    /// The pause asked for by [`Action::SleepUntil`] is over.
    Timer,
    /// The broker is shutting down.
    Shutdown,
}

/// Why the lifecycle ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// Shut down before any registration, or with controlled shutdown off.
    Shutdown,
    /// Controlled shutdown: the controller moved leadership away.
    LeadershipMoved,
    /// Controlled shutdown: the controller refused the heartbeat.
    Refused(ErrorCode),
    /// Controlled shutdown: the controller did not answer.
    ControllerUnreachable,
    /// Controlled shutdown: `controlled_shutdown_timeout_ms` passed.
    TimedOut,
}

/// What the shell does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Send BrokerRegistration; report [`Event::Registered`] or
    /// [`Event::RegistrationFailed`].
    Register,
    /// Send BrokerHeartbeat; report [`Event::Heartbeat`].
    Heartbeat {
        /// The registration the heartbeat is for.
        broker_epoch: i64,
        /// Ask the controller to move leadership away (controlled shutdown).
        want_shutdown: bool,
    },
    /// Wait; report [`Event::Timer`] then (or [`Event::Shutdown`] first).
    SleepUntil(Instant),
    /// End the lifecycle.
    Stop(StopReason),
}

/// One step: what to publish (the broker epoch and fencing), then what to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct Step {
    /// The status to publish, if the step made one (every registration and every
    /// answered heartbeat).
    pub status: Option<BrokerStatus>,
    /// The next action.
    pub action: Action,
}

impl Step {
    fn then(action: Action) -> Step {
        Step {
            status: None,
            action,
        }
    }
}

/// The broker's lifecycle with the controller.
#[derive(Debug, Clone)]
pub struct Lifecycle {
    config: LifecycleConfig,
    state: State,
}

impl Lifecycle {
    /// A broker that has not registered yet; its first action is
    /// [`Action::Register`].
    pub fn new(config: LifecycleConfig) -> Lifecycle {
        Lifecycle {
            config,
            state: State::Registering,
        }
    }

    /// Where the broker stands.
    pub fn state(&self) -> State {
        self.state
    }

    /// Moves the lifecycle by one event at `now`.
    pub fn on_event(&mut self, event: Event, now: Instant) -> Step {
        match (self.state, event) {
            (State::Stopped, _) => Step::then(Action::Stop(StopReason::Shutdown)),
            (State::ShuttingDown { .. }, Event::Shutdown) => self.shutdown_heartbeat_later(now),
            (_, Event::Shutdown) => self.shutdown(now),

            (State::Registering, Event::Registered { broker_epoch }) => {
                self.state = State::Fenced { broker_epoch };
                Step {
                    status: Some(BrokerStatus {
                        broker_epoch,
                        fenced: true,
                    }),
                    action: Action::Heartbeat {
                        broker_epoch,
                        want_shutdown: false,
                    },
                }
            }
            (State::Registering, Event::RegistrationFailed) => Step::then(Action::SleepUntil(
                now + self.config.heartbeat_interval.min(MAX_REGISTRATION_RETRY),
            )),
            (State::Registering, Event::Timer) => Step::then(Action::Register),

            (
                State::Fenced { broker_epoch } | State::Unfenced { broker_epoch },
                Event::Heartbeat(answer),
            ) => match answer {
                HeartbeatAnswer::Ok { is_fenced, .. } => {
                    self.state = if is_fenced {
                        State::Fenced { broker_epoch }
                    } else {
                        State::Unfenced { broker_epoch }
                    };
                    Step {
                        status: Some(BrokerStatus {
                            broker_epoch,
                            fenced: is_fenced,
                        }),
                        action: self.next_heartbeat(now),
                    }
                }
                // The controller lost or replaced this registration (session
                // expired, controller restarted): register again at once.
                HeartbeatAnswer::Error(
                    ErrorCode::StaleBrokerEpoch | ErrorCode::BrokerIdNotRegistered,
                ) => {
                    self.state = State::Registering;
                    Step::then(Action::Register)
                }
                HeartbeatAnswer::Error(_)
                | HeartbeatAnswer::Unexpected
                | HeartbeatAnswer::Unreachable => Step::then(self.next_heartbeat(now)),
            },
            (State::Fenced { broker_epoch } | State::Unfenced { broker_epoch }, Event::Timer) => {
                Step::then(Action::Heartbeat {
                    broker_epoch,
                    want_shutdown: false,
                })
            }

            (State::ShuttingDown { .. }, Event::Heartbeat(answer)) => match answer {
                HeartbeatAnswer::Ok {
                    should_shutdown: true,
                    ..
                } => self.stop(StopReason::LeadershipMoved),
                HeartbeatAnswer::Error(code) => self.stop(StopReason::Refused(code)),
                HeartbeatAnswer::Unreachable => self.stop(StopReason::ControllerUnreachable),
                HeartbeatAnswer::Ok { .. } | HeartbeatAnswer::Unexpected => {
                    self.shutdown_heartbeat_later(now)
                }
            },
            (
                State::ShuttingDown {
                    broker_epoch,
                    deadline,
                },
                Event::Timer,
            ) => {
                if now >= deadline {
                    self.stop(StopReason::TimedOut)
                } else {
                    Step::then(Action::Heartbeat {
                        broker_epoch,
                        want_shutdown: true,
                    })
                }
            }

            // An answer to a request of another state (none is sent in these).
            (State::Registering, Event::Heartbeat(_))
            | (
                State::Fenced { .. } | State::Unfenced { .. } | State::ShuttingDown { .. },
                Event::Registered { .. } | Event::RegistrationFailed,
            ) => {
                debug_assert!(false, "{event:?} in {:?}", self.state);
                Step::then(self.resume(now))
            }
        }
    }

    /// The pause before the next heartbeat: short while fenced, so the broker is
    /// unfenced as soon as it has caught up.
    fn next_heartbeat(&self, now: Instant) -> Action {
        let interval = self.config.heartbeat_interval;
        let wait = match self.state {
            State::Fenced { .. } => interval.min(FENCED_HEARTBEAT_INTERVAL),
            _ => interval,
        };
        Action::SleepUntil(now + wait)
    }

    fn shutdown(&mut self, now: Instant) -> Step {
        match (self.state, self.config.controlled_shutdown_timeout) {
            (State::Fenced { broker_epoch } | State::Unfenced { broker_epoch }, Some(timeout)) => {
                self.state = State::ShuttingDown {
                    broker_epoch,
                    deadline: now + timeout,
                };
                if timeout.is_zero() {
                    return self.stop(StopReason::TimedOut);
                }
                Step::then(Action::Heartbeat {
                    broker_epoch,
                    want_shutdown: true,
                })
            }
            _ => self.stop(StopReason::Shutdown),
        }
    }

    fn shutdown_heartbeat_later(&self, now: Instant) -> Step {
        Step::then(Action::SleepUntil(now + SHUTDOWN_HEARTBEAT_INTERVAL))
    }

    fn stop(&mut self, reason: StopReason) -> Step {
        self.state = State::Stopped;
        Step::then(Action::Stop(reason))
    }

    /// The action of the current state, when an event did not fit it.
    fn resume(&self, now: Instant) -> Action {
        match self.state {
            State::Registering => Action::Register,
            State::Fenced { .. } | State::Unfenced { .. } => self.next_heartbeat(now),
            State::ShuttingDown { .. } => Action::SleepUntil(now + SHUTDOWN_HEARTBEAT_INTERVAL),
            State::Stopped => Action::Stop(StopReason::Shutdown),
        }
    }
}

#[cfg(test)]
mod tests {
    //! Each test is a table of steps (time, event → status, action, state).

    use std::sync::OnceLock;

    use super::*;
    use Action::{Heartbeat, Register, SleepUntil, Stop};
    use ErrorCode as E;

    /// Milliseconds after a fixed base instant.
    fn at(ms: u64) -> Instant {
        static BASE: OnceLock<Instant> = OnceLock::new();
        *BASE.get_or_init(Instant::now) + Duration::from_millis(ms)
    }

    /// Heartbeats every 2 s; controlled shutdown waits at most 5 s if `Some`.
    fn lifecycle(heartbeat_ms: u64, controlled_shutdown_ms: Option<u64>) -> Lifecycle {
        Lifecycle::new(LifecycleConfig {
            heartbeat_interval: Duration::from_millis(heartbeat_ms),
            controlled_shutdown_timeout: controlled_shutdown_ms.map(Duration::from_millis),
        })
    }

    fn status(broker_epoch: i64, fenced: bool) -> Option<BrokerStatus> {
        Some(BrokerStatus {
            broker_epoch,
            fenced,
        })
    }

    fn hb(broker_epoch: i64) -> Action {
        Heartbeat {
            broker_epoch,
            want_shutdown: false,
        }
    }

    fn shutdown_hb(broker_epoch: i64) -> Action {
        Heartbeat {
            broker_epoch,
            want_shutdown: true,
        }
    }

    fn answered(is_fenced: bool) -> Event {
        Event::Heartbeat(HeartbeatAnswer::Ok {
            is_fenced,
            should_shutdown: false,
        })
    }

    fn fenced(broker_epoch: i64) -> State {
        State::Fenced { broker_epoch }
    }

    fn unfenced(broker_epoch: i64) -> State {
        State::Unfenced { broker_epoch }
    }

    type Row = (u64, Event, Option<BrokerStatus>, Action, State);

    /// Runs the steps, checking each step and the state after it.
    fn run(mut l: Lifecycle, steps: &[Row]) -> Lifecycle {
        for (i, (ms, event, status, action, state)) in steps.iter().enumerate() {
            let step = l.on_event(*event, at(*ms));
            assert_eq!(
                (step.status, step.action, l.state()),
                (*status, *action, *state),
                "step {i}: {event:?} at {ms} ms"
            );
        }
        l
    }

    /// Registered in epoch 7, unfenced, at 0 ms.
    fn serving(controlled_shutdown_ms: Option<u64>) -> Lifecycle {
        run(
            lifecycle(2000, controlled_shutdown_ms),
            &[
                (
                    0,
                    Event::Registered { broker_epoch: 7 },
                    status(7, true),
                    hb(7),
                    fenced(7),
                ),
                (
                    0,
                    answered(false),
                    status(7, false),
                    SleepUntil(at(2000)),
                    unfenced(7),
                ),
            ],
        )
    }

    #[test]
    fn registers_fenced_then_heartbeats_until_unfenced() {
        let l = lifecycle(2000, None);
        assert_eq!(l.state(), State::Registering);
        run(
            l,
            &[
                // A new registration is fenced until a heartbeat says otherwise.
                (
                    0,
                    Event::Registered { broker_epoch: 7 },
                    status(7, true),
                    hb(7),
                    fenced(7),
                ),
                // While fenced, heartbeats every 100 ms: unfenced as soon as caught up.
                (
                    1,
                    answered(true),
                    status(7, true),
                    SleepUntil(at(101)),
                    fenced(7),
                ),
                (101, Event::Timer, None, hb(7), fenced(7)),
                (
                    102,
                    answered(false),
                    status(7, false),
                    SleepUntil(at(2102)),
                    unfenced(7),
                ),
                (2102, Event::Timer, None, hb(7), unfenced(7)),
                // The controller may fence a serving broker again.
                (
                    2103,
                    answered(true),
                    status(7, true),
                    SleepUntil(at(2203)),
                    fenced(7),
                ),
            ],
        );
    }

    #[test]
    fn fenced_heartbeats_never_slower_than_the_configured_interval() {
        run(
            lifecycle(40, None),
            &[
                (
                    0,
                    Event::Registered { broker_epoch: 1 },
                    status(1, true),
                    hb(1),
                    fenced(1),
                ),
                (
                    0,
                    answered(true),
                    status(1, true),
                    SleepUntil(at(40)),
                    fenced(1),
                ),
            ],
        );
    }

    #[test]
    fn failed_registration_retries_after_the_heartbeat_interval_at_most_a_second() {
        run(
            lifecycle(2000, None),
            &[
                (
                    0,
                    Event::RegistrationFailed,
                    None,
                    SleepUntil(at(1000)),
                    State::Registering,
                ),
                (1000, Event::Timer, None, Register, State::Registering),
                (
                    1001,
                    Event::Registered { broker_epoch: 3 },
                    status(3, true),
                    hb(3),
                    fenced(3),
                ),
            ],
        );
        run(
            lifecycle(300, None),
            &[(
                0,
                Event::RegistrationFailed,
                None,
                SleepUntil(at(300)),
                State::Registering,
            )],
        );
    }

    #[test]
    fn lost_registration_registers_again_at_once() {
        // STALE_BROKER_EPOCH: the controller holds a newer registration of this id;
        // BROKER_ID_NOT_REGISTERED: it lost this one (session expired, restart).
        for code in [E::StaleBrokerEpoch, E::BrokerIdNotRegistered] {
            let lost = Event::Heartbeat(HeartbeatAnswer::Error(code));
            run(
                serving(None),
                &[
                    (10, lost, None, Register, State::Registering),
                    (
                        11,
                        Event::Registered { broker_epoch: 9 },
                        status(9, true),
                        hb(9),
                        fenced(9),
                    ),
                ],
            );
            run(
                lifecycle(2000, None),
                &[
                    (
                        0,
                        Event::Registered { broker_epoch: 7 },
                        status(7, true),
                        hb(7),
                        fenced(7),
                    ),
                    (1, lost, None, Register, State::Registering),
                ],
            );
        }
    }

    #[test]
    fn failed_heartbeats_keep_the_standing_and_try_again_next_interval() {
        for answer in [
            HeartbeatAnswer::Error(E::NotController),
            HeartbeatAnswer::Error(E::UnknownServerError),
            HeartbeatAnswer::Unexpected,
            HeartbeatAnswer::Unreachable,
        ] {
            let event = Event::Heartbeat(answer);
            run(
                serving(None),
                &[(10, event, None, SleepUntil(at(2010)), unfenced(7))],
            );
            run(
                lifecycle(2000, None),
                &[
                    (
                        0,
                        Event::Registered { broker_epoch: 7 },
                        status(7, true),
                        hb(7),
                        fenced(7),
                    ),
                    (0, event, None, SleepUntil(at(100)), fenced(7)),
                ],
            );
        }
    }

    #[test]
    fn shutdown_before_registration_or_without_controlled_shutdown_stops_at_once() {
        run(
            lifecycle(2000, Some(5000)),
            &[(
                0,
                Event::Shutdown,
                None,
                Stop(StopReason::Shutdown),
                State::Stopped,
            )],
        );
        run(
            serving(None),
            &[(
                5,
                Event::Shutdown,
                None,
                Stop(StopReason::Shutdown),
                State::Stopped,
            )],
        );
        let shut_down = run(
            lifecycle(2000, None),
            &[(
                0,
                Event::Shutdown,
                None,
                Stop(StopReason::Shutdown),
                State::Stopped,
            )],
        );
        // Stopped for good.
        run(
            shut_down,
            &[(
                1,
                Event::Timer,
                None,
                Stop(StopReason::Shutdown),
                State::Stopped,
            )],
        );
    }

    #[test]
    fn controlled_shutdown_waits_until_leadership_moved() {
        let shutting_down = State::ShuttingDown {
            broker_epoch: 7,
            deadline: at(5010),
        };
        run(
            serving(Some(5000)),
            &[
                (10, Event::Shutdown, None, shutdown_hb(7), shutting_down),
                (
                    11,
                    answered(false),
                    None,
                    SleepUntil(at(111)),
                    shutting_down,
                ),
                (111, Event::Timer, None, shutdown_hb(7), shutting_down),
                (
                    112,
                    Event::Heartbeat(HeartbeatAnswer::Unexpected),
                    None,
                    SleepUntil(at(212)),
                    shutting_down,
                ),
                (212, Event::Timer, None, shutdown_hb(7), shutting_down),
                (
                    213,
                    Event::Heartbeat(HeartbeatAnswer::Ok {
                        is_fenced: true,
                        should_shutdown: true,
                    }),
                    None,
                    Stop(StopReason::LeadershipMoved),
                    State::Stopped,
                ),
            ],
        );
    }

    #[test]
    fn controlled_shutdown_of_a_fenced_broker_asks_too() {
        run(
            lifecycle(2000, Some(5000)),
            &[
                (
                    0,
                    Event::Registered { broker_epoch: 7 },
                    status(7, true),
                    hb(7),
                    fenced(7),
                ),
                (
                    1,
                    Event::Shutdown,
                    None,
                    shutdown_hb(7),
                    State::ShuttingDown {
                        broker_epoch: 7,
                        deadline: at(5001),
                    },
                ),
            ],
        );
    }

    #[test]
    fn controlled_shutdown_gives_up_on_error_silence_or_deadline() {
        let shutting_down = State::ShuttingDown {
            broker_epoch: 7,
            deadline: at(310),
        };
        let start = (10, Event::Shutdown, None, shutdown_hb(7), shutting_down);
        run(
            serving(Some(300)),
            &[
                start,
                (
                    11,
                    Event::Heartbeat(HeartbeatAnswer::Error(E::StaleBrokerEpoch)),
                    None,
                    Stop(StopReason::Refused(E::StaleBrokerEpoch)),
                    State::Stopped,
                ),
            ],
        );
        run(
            serving(Some(300)),
            &[
                start,
                (
                    11,
                    Event::Heartbeat(HeartbeatAnswer::Unreachable),
                    None,
                    Stop(StopReason::ControllerUnreachable),
                    State::Stopped,
                ),
            ],
        );
        run(
            serving(Some(300)),
            &[
                start,
                (
                    11,
                    answered(false),
                    None,
                    SleepUntil(at(111)),
                    shutting_down,
                ),
                (309, Event::Timer, None, shutdown_hb(7), shutting_down),
                (
                    309,
                    answered(false),
                    None,
                    SleepUntil(at(409)),
                    shutting_down,
                ),
                // A second shutdown signal changes nothing.
                (
                    310,
                    Event::Shutdown,
                    None,
                    SleepUntil(at(410)),
                    shutting_down,
                ),
                (
                    409,
                    Event::Timer,
                    None,
                    Stop(StopReason::TimedOut),
                    State::Stopped,
                ),
            ],
        );
        // A zero timeout gives up before asking.
        run(
            serving(Some(0)),
            &[(
                10,
                Event::Shutdown,
                None,
                Stop(StopReason::TimedOut),
                State::Stopped,
            )],
        );
    }
}
