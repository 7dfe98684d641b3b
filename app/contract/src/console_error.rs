//! Why a console call was refused, in the console's words, with the code the admin API
//! answers for the same refusal: the server functions' error, shared by the server (which
//! turns its API error into it) and the console (which renders it).

/// Why a console call was refused; rendered to the user as its message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConsoleError {
    /// No session, or an expired one: the console sends the user to the login page.
    Unauthenticated,
    /// The role may not do this.
    Forbidden,
    /// Absent, or owned by another merchant.
    NotFound,
    /// The input breaks a rule; the message says which, the code is the admin API's.
    Invalid { code: &'static str, message: String },
    /// The thing is not in a state that allows this (e.g. already requeued); the message
    /// says why, the code is the admin API's.
    Conflict { code: &'static str, message: String },
    /// A store the call needs (etcd, RabbitMQ, Redis) did not answer; the detail names it.
    Unavailable(String),
    /// Too many attempts; try again later.
    RateLimited,
    /// Something broke on the server; details are in the server log only.
    Internal,
}

impl std::fmt::Display for ConsoleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConsoleError::Unauthenticated => f.write_str("please sign in"),
            ConsoleError::Forbidden => f.write_str("your role may not do this"),
            ConsoleError::NotFound => f.write_str("not found"),
            ConsoleError::Invalid { message, .. } | ConsoleError::Conflict { message, .. } => {
                f.write_str(message)
            }
            ConsoleError::Unavailable(detail) => write!(f, "unavailable ({detail}), try again"),
            ConsoleError::RateLimited => f.write_str("too many attempts, wait a minute"),
            ConsoleError::Internal => f.write_str("internal error, see the server log"),
        }
    }
}

impl ConsoleError {
    /// Bad input under the admin API's general code.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ConsoleError::Invalid {
            code: "BAD_REQUEST",
            message: message.into(),
        }
    }

    /// The code the admin API answers for the same refusal.
    pub fn code(&self) -> &'static str {
        match self {
            ConsoleError::Unauthenticated => "UNAUTHENTICATED",
            ConsoleError::Forbidden => "FORBIDDEN",
            ConsoleError::NotFound => "NOT_FOUND",
            ConsoleError::Invalid { code, .. } | ConsoleError::Conflict { code, .. } => code,
            ConsoleError::Unavailable(_) => "UNAVAILABLE",
            ConsoleError::RateLimited => "RATE_LIMITED",
            ConsoleError::Internal => "INTERNAL",
        }
    }
}
