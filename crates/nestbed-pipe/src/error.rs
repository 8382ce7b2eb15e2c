//! Parameter validation errors: every problem, each naming its field.

use std::fmt;

/// One invalid parameter: the dotted path of the field and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamError {
    /// Dotted path of the offending field, e.g. `delay.duplicate`.
    pub field: String,
    /// What is wrong with it and what is allowed.
    pub message: String,
}

impl fmt::Display for ParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// All problems found in one set of parameters (never empty when returned
/// as an error). Validation collects every problem before reporting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamErrors(pub Vec<ParamError>);

impl ParamErrors {
    /// The individual problems.
    pub fn errors(&self) -> &[ParamError] {
        &self.0
    }
}

impl fmt::Display for ParamErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid pipe parameters: ")?;
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                write!(f, "; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ParamErrors {}

/// Collects validation problems.
#[derive(Default)]
pub(crate) struct Problems(Vec<ParamError>);

impl Problems {
    pub(crate) fn push(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(ParamError {
            field: field.into(),
            message: message.into(),
        });
    }

    /// Records a problem unless `value` is a finite probability in [0, 1].
    pub(crate) fn probability(&mut self, field: &str, value: f64) {
        if !(0.0..=1.0).contains(&value) {
            self.push(
                field,
                format!("must be a probability in [0, 1], got {value}"),
            );
        }
    }

    /// Records a problem if `value` exceeds `max`.
    pub(crate) fn at_most(&mut self, field: &str, value: u64, max: u64) {
        if value > max {
            self.push(field, format!("must be at most {max}, got {value}"));
        }
    }

    pub(crate) fn into_result(self) -> Result<(), ParamErrors> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(ParamErrors(self.0))
        }
    }
}
