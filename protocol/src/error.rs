//! The JSON body of every error response.

use serde::{Deserialize, Serialize};

use crate::request::RequestError;

/// Body of every non-2xx reply, `{"error":"message"}`, so clients parse failures one way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ErrorBody {
    pub error: String,
}

impl ErrorBody {
    pub fn new(error: impl Into<String>) -> Self {
        Self { error: error.into() }
    }
}

/// A rejected request keeps its `field: message` text, which names what to fix.
impl From<RequestError> for ErrorBody {
    fn from(e: RequestError) -> Self {
        Self::new(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_body_shape() {
        let body: ErrorBody = RequestError::new("steps", "must be at least 1, got 0").into();
        assert_eq!(serde_json::to_string(&body).unwrap(), r#"{"error":"steps: must be at least 1, got 0"}"#);
        let back: ErrorBody = serde_json::from_str(r#"{"error":"not found"}"#).unwrap();
        assert_eq!(back, ErrorBody::new("not found"));
    }
}
