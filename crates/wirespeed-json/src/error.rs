//! Decoder errors: what was wrong, where, and in which category.

use std::fmt;

/// The category of a decode error, coarse enough for a client to act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Category {
    /// Not JSON: a bad token, a truncated body, trailing bytes.
    Syntax,
    /// JSON, but not an infer request: a missing field, a field of the wrong kind.
    Schema,
    /// A value of the wrong type for the tensor's datatype, or an unknown datatype.
    Type,
    /// A number outside its datatype's range.
    Range,
    /// `data` does not match `shape`.
    Shape,
    /// A configured limit was exceeded.
    Limit,
}

impl Category {
    /// The lower-case name used in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Syntax => "syntax",
            Category::Schema => "schema",
            Category::Type => "type",
            Category::Range => "range",
            Category::Shape => "shape",
            Category::Limit => "limit",
        }
    }
}

/// Why a request could not be decoded: the category, the byte offset in the
/// body, the input concerned when there is one, and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    category: Category,
    offset: u64,
    input: Option<String>,
    message: String,
}

impl DecodeError {
    pub(crate) fn new(category: Category, offset: u64, message: impl Into<String>) -> DecodeError {
        DecodeError {
            category,
            offset,
            input: None,
            message: message.into(),
        }
    }

    /// A request limit passed at `offset`: the same words as on every
    /// other protocol, with the offset.
    pub(crate) fn limit(offset: u64, e: wirespeed_core::LimitError) -> DecodeError {
        let input = e.input().map(str::to_owned);
        DecodeError {
            category: Category::Limit,
            offset,
            input,
            message: e.message().to_owned(),
        }
    }

    pub(crate) fn with_input(mut self, input: Option<&str>) -> DecodeError {
        if self.input.is_none() {
            self.input = input.map(str::to_owned);
        }
        self
    }

    /// The category.
    pub fn category(&self) -> Category {
        self.category
    }

    /// The byte offset in the body where the problem was found.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The name of the input concerned, when known.
    pub fn input(&self) -> Option<&str> {
        self.input.as_deref()
    }

    /// The message, without offset or input.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.input {
            Some(name) => write!(
                f,
                "{} error in input '{}' at byte {}: {}",
                self.category.as_str(),
                name,
                self.offset,
                self.message
            ),
            None => write!(
                f,
                "{} error at byte {}: {}",
                self.category.as_str(),
                self.offset,
                self.message
            ),
        }
    }
}

impl std::error::Error for DecodeError {}
