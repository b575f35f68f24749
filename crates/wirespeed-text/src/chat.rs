//! A model that generates, with its chat template: OpenAI's chat
//! messages become its prompt as Hugging Face's `apply_chat_template`
//! makes it, from the `chat_template` of the folder's
//! `tokenizer_config.json` (or a `.jinja` file), rendered by `minijinja`
//! with Jinja's settings there (`trim_blocks`, `lstrip_blocks`), Python's
//! string methods (`minijinja-contrib`'s pycompat), and the functions
//! templates call (`raise_exception`, `strftime_now`). The model itself
//! is unchanged: it gets the prompt as `text_input`, as Triton's LLM
//! models do, and streams `text_output`.

use std::path::PathBuf;
use std::sync::Arc;

use minijinja::{Environment, ErrorKind as JinjaError, Value};
use serde::Deserialize;
use tokenizers::Tokenizer;
use wirespeed_core::{
    Binding, Error, Execution, Heads, InferCall, InferFuture, Model, ModelMetadata, Tensor,
    TextModel,
};

/// Where Hugging Face keeps a model's chat template.
pub(crate) const TOKENIZER_CONFIG: &str = "tokenizer_config.json";

/// `[chat]`, as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ChatKeys {
    #[serde(default)]
    template: Option<String>,
    #[serde(default)]
    tokenizer: Option<String>,
}

/// The model, its template and its tokenizer.
pub(crate) struct Chat {
    model: Arc<dyn Model>,
    env: Environment<'static>,
    bos: String,
    eos: String,
    tokenizer: Option<Tokenizer>,
}

impl Chat {
    pub(crate) fn wrap(
        model: Arc<dyn Model>,
        keys: &ChatKeys,
        files: impl Fn(&str, &str) -> Result<PathBuf, String>,
    ) -> Result<Chat, String> {
        let path = files(
            "template",
            keys.template.as_deref().unwrap_or(TOKENIZER_CONFIG),
        )?;
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let (source, bos, eos) = if path.extension().is_some_and(|e| e == "json") {
            let config: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| format!("{} is not JSON: {e}", path.display()))?;
            let source = match config.get("chat_template") {
                Some(serde_json::Value::String(s)) => s.clone(),
                // Several named templates: the default one.
                Some(serde_json::Value::Array(named)) => named
                    .iter()
                    .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
                    .and_then(|t| t.get("template")?.as_str())
                    .map(str::to_owned)
                    .ok_or_else(|| {
                        format!(
                            "{}: chat_template names no 'default' template",
                            path.display()
                        )
                    })?,
                _ => return Err(format!("{} has no chat_template", path.display())),
            };
            let token = |key: &str| match config.get(key) {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(serde_json::Value::Object(o)) => o
                    .get("content")
                    .and_then(|c| c.as_str())
                    .unwrap_or_default()
                    .to_owned(),
                _ => String::new(),
            };
            (source, token("bos_token"), token("eos_token"))
        } else {
            (text, String::new(), String::new())
        };
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |message: String| -> Result<Value, minijinja::Error> {
                Err(minijinja::Error::new(JinjaError::InvalidOperation, message))
            },
        );
        env.add_function("strftime_now", |format: String| -> String {
            format_now(&format)
        });
        env.add_template_owned("chat", source)
            .map_err(|e| format!("the chat template of {}: {e:#}", path.display()))?;
        let tokenizer = match &keys.tokenizer {
            Some(name) => Some(super::load_tokenizer(&files("tokenizer", name)?)?),
            None => {
                let default = files("tokenizer", "tokenizer.json")?;
                default
                    .is_file()
                    .then(|| super::load_tokenizer(&default))
                    .transpose()?
            }
        };
        tracing::info!(model = %model.metadata().name, template = %path.display(), "chat template");
        Ok(Chat {
            model,
            env,
            bos,
            eos,
            tokenizer,
        })
    }

    fn render(&self, messages: &str, tools: Option<&str>) -> Result<String, String> {
        let messages = conversation(messages)?;
        let tools: Option<serde_json::Value> = tools
            .map(serde_json::from_str)
            .transpose()
            .map_err(|e| format!("'tools' is not JSON: {e}"))?;
        let template = self.env.get_template("chat").map_err(|e| e.to_string())?;
        template
            .render(minijinja::context! {
                messages => Value::from_serialize(&messages),
                tools => tools.as_ref().filter(|t| !t.is_null()).map(Value::from_serialize),
                add_generation_prompt => true,
                bos_token => self.bos.as_str(),
                eos_token => self.eos.as_str(),
            })
            .map_err(|e| format!("the chat template failed: {e:#}"))
    }
}

/// The time now in a `strftime` format, for templates that date their
/// prompts (the UTC date and time; `%d %b %Y` and the like).
fn format_now(format: &str) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs() as i64;
    let days = now.div_euclid(86_400);
    let secs = now.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let name = MONTHS[(month - 1) as usize];
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out.push_str(&year.to_string()),
            Some('m') => out.push_str(&format!("{month:02}")),
            Some('d') => out.push_str(&format!("{day:02}")),
            Some('B') => out.push_str(name),
            Some('b') => out.push_str(&name[..3]),
            Some('H') => out.push_str(&format!("{:02}", secs / 3600)),
            Some('M') => out.push_str(&format!("{:02}", secs / 60 % 60)),
            Some('S') => out.push_str(&format!("{:02}", secs % 60)),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

impl Model for Chat {
    fn metadata(&self) -> &ModelMetadata {
        self.model.metadata()
    }

    fn infer(&self, inputs: &[Tensor], outputs: &[usize]) -> Result<Vec<Tensor>, Error> {
        self.model.infer(inputs, outputs)
    }

    fn infer_async(self: Arc<Self>, call: InferCall) -> InferFuture {
        Arc::clone(&self.model).infer_async(call)
    }

    fn heads(&self) -> Heads {
        self.model.heads()
    }

    fn class_labels(&self) -> Vec<(String, Vec<String>)> {
        self.model.class_labels()
    }

    fn binding(&self) -> Binding {
        self.model.binding()
    }

    fn decoupled(&self) -> bool {
        self.model.decoupled()
    }

    fn metadata_answer(&self) -> Option<&str> {
        self.model.metadata_answer()
    }

    fn ready(&self) -> Result<(), String> {
        self.model.ready()
    }

    fn default_concurrency(&self) -> Option<usize> {
        self.model.default_concurrency()
    }

    fn execution(&self, elements: usize) -> Execution {
        self.model.execution(elements)
    }

    fn text(&self) -> Option<&dyn TextModel> {
        Some(self)
    }
}

/// A chat's messages, read from the request's JSON text and checked: a
/// list of at least one message, each with a role OpenAI's API knows.
fn conversation(text: &str) -> Result<Vec<serde_json::Value>, String> {
    let messages = match serde_json::from_str(text) {
        Ok(serde_json::Value::Array(m)) if !m.is_empty() => m,
        Ok(serde_json::Value::Array(_)) => return Err("'messages' is empty".into()),
        Ok(_) => return Err("'messages' must be a list of messages".into()),
        Err(e) => return Err(format!("'messages' is not JSON: {e}")),
    };
    for (i, m) in messages.iter().enumerate() {
        let role = m.get("role").and_then(serde_json::Value::as_str);
        if !matches!(
            role,
            Some("system" | "developer" | "user" | "assistant" | "tool" | "function")
        ) {
            return Err(format!(
                "messages[{i}] has role {}; it is system, developer, user, assistant or tool",
                m.get("role")
                    .map_or("none".into(), serde_json::Value::to_string)
            ));
        }
    }
    Ok(messages)
}

impl TextModel for Chat {
    fn chat_prompt(&self, messages: &str, tools: Option<&str>) -> Option<Result<String, String>> {
        Some(self.render(messages, tools))
    }

    fn count_tokens(&self, text: &str) -> Option<usize> {
        let tokenizer = self.tokenizer.as_ref()?;
        tokenizer
            .encode(text, false)
            .ok()
            .map(|e| e.get_ids().len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_civil() {
        let year = format_now("%Y").parse::<i64>().unwrap();
        assert!((2024..2200).contains(&year));
        assert_eq!(format_now("%%").len(), 1);
        assert_eq!(format_now("%d %b").len(), 6);
    }
}
