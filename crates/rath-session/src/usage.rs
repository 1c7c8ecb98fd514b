//! Token usage: cumulative per session, and attributed per agent.
//!
//! ```
//! use rath_session::Usage;
//!
//! let a = Usage::new(40, 12);
//! let b = Usage::new(70, 11);
//! assert_eq!(a + b, Usage { prompt_tokens: 110, completion_tokens: 23, total_tokens: 133 });
//! ```

use std::ops::{Add, AddAssign};

use serde::{Deserialize, Serialize};

/// Prompt, completion and total tokens, with OpenRath's field names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens sent to the model.
    pub prompt_tokens: u64,
    /// Tokens the model produced.
    pub completion_tokens: u64,
    /// As reported; normally the sum of the two.
    pub total_tokens: u64,
}

impl Usage {
    /// Usage with `total_tokens = prompt + completion`.
    pub const fn new(prompt_tokens: u64, completion_tokens: u64) -> Self {
        Self {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
        }
    }

    /// True when every figure is zero.
    pub fn is_zero(&self) -> bool {
        self.prompt_tokens == 0 && self.completion_tokens == 0 && self.total_tokens == 0
    }
}

impl Add for Usage {
    type Output = Usage;
    fn add(self, rhs: Usage) -> Usage {
        Usage {
            prompt_tokens: self.prompt_tokens.saturating_add(rhs.prompt_tokens),
            completion_tokens: self.completion_tokens.saturating_add(rhs.completion_tokens),
            total_tokens: self.total_tokens.saturating_add(rhs.total_tokens),
        }
    }
}

impl AddAssign for Usage {
    fn add_assign(&mut self, rhs: Usage) {
        *self = *self + rhs;
    }
}

/// Sums two optional usages the way OpenRath's merge does: `None + None = None`.
pub fn sum_optional(a: Option<Usage>, b: Option<Usage>) -> Option<Usage> {
    match (a, b) {
        (None, None) => None,
        (Some(x), None) | (None, Some(x)) => Some(x),
        (Some(x), Some(y)) => Some(x + y),
    }
}
