//! Walking a chunk: the JSON grammar byte by byte with the stack of open
//! containers, bare tokens (numbers, literals) and strings finished when
//! a chunk boundary cuts them, and FP32/FP64 runs in a tight loop.

use super::*;

impl RequestDecoder {
    pub(super) fn feed_chunk(&mut self, chunk: &[u8]) -> Result<(), DecodeError> {
        if let Some(capture) = &mut self.capture {
            capture.from = 0;
        }
        let mut pos = match self.partial {
            Partial::None => 0,
            Partial::Bare { .. } => self.continue_bare(chunk)?,
            Partial::String { .. } => self.continue_string(chunk, 0)?,
        };
        let len = chunk.len();
        while pos < len {
            let b = chunk[pos];
            if is_ws(b) {
                pos += 1;
                continue;
            }
            let at = self.base + pos as u64;
            match self.expect {
                Expect::Value | Expect::ValueOrEnd => {
                    if let Some(Frame {
                        ctx: Ctx::Data(depth),
                        ..
                    }) = self.stack.last()
                    {
                        let depth = *depth;
                        if b != b']' {
                            let next = self.fast_floats(chunk, pos, depth)?;
                            if next != pos {
                                pos = next;
                                continue;
                            }
                        }
                    }
                    match b {
                        b'{' => {
                            self.open(Container::Object, pos, at)?;
                            self.expect = Expect::KeyOrEnd;
                            pos += 1;
                        }
                        b'[' => {
                            self.open(Container::Array, pos, at)?;
                            self.expect = Expect::ValueOrEnd;
                            pos += 1;
                        }
                        b']' if self.expect == Expect::ValueOrEnd => {
                            self.close(Container::Array, chunk, pos, at)?;
                            pos += 1;
                        }
                        b'"' => {
                            self.begin_string(false, at);
                            pos = self.continue_string(chunk, pos + 1)?;
                        }
                        _ if is_bare(b) => pos = self.begin_bare(chunk, pos)?,
                        _ => {
                            return Err(syntax(
                                at,
                                format!("expected a value, found {}", describe(b)),
                            ))
                        }
                    }
                }
                Expect::KeyOrEnd | Expect::Key => match b {
                    b'"' => {
                        self.begin_string(true, at);
                        pos = self.continue_string(chunk, pos + 1)?;
                    }
                    b'}' if self.expect == Expect::KeyOrEnd => {
                        self.close(Container::Object, chunk, pos, at)?;
                        pos += 1;
                    }
                    _ => {
                        return Err(syntax(
                            at,
                            format!("expected a string key, found {}", describe(b)),
                        ))
                    }
                },
                Expect::Colon => {
                    if b != b':' {
                        return Err(syntax(
                            at,
                            format!("expected ':' after the key, found {}", describe(b)),
                        ));
                    }
                    self.expect = Expect::Value;
                    pos += 1;
                }
                Expect::AfterValue => {
                    match (b, self.stack.last().map(|f| f.container)) {
                        (b',', Some(Container::Object)) => self.expect = Expect::Key,
                        (b',', Some(Container::Array)) => self.expect = Expect::Value,
                        (b']', _) => self.close(Container::Array, chunk, pos, at)?,
                        (b'}', _) => self.close(Container::Object, chunk, pos, at)?,
                        _ => {
                            return Err(syntax(
                                at,
                                format!("expected ',' or a closing bracket, found {}", describe(b)),
                            ))
                        }
                    }
                    pos += 1;
                }
                Expect::Done => {
                    return Err(syntax(
                        at,
                        format!("unexpected {} after the end of the request", describe(b)),
                    ))
                }
            }
        }
        if let Some(capture) = &mut self.capture {
            capture
                .bytes
                .extend_from_slice(&chunk[capture.from.min(len)..]);
        }
        Ok(())
    }

    /// Decodes a run of `ws number ws ,` directly into an `f32` or `f64`
    /// buffer: the loop that most bytes of a large request go through.
    /// Returns where it stopped; anything unusual is left to the general path.
    pub(super) fn fast_floats(
        &mut self,
        chunk: &[u8],
        pos: usize,
        depth: usize,
    ) -> Result<usize, DecodeError> {
        match builder_of(
            &mut self.data_root,
            &mut self.named,
            &mut self.request.inputs,
        )
        .map(|b| b.datatype())
        {
            Some(DataType::Fp32) => self.float_run::<f32>(chunk, pos, depth),
            Some(DataType::Fp64) => self.float_run::<f64>(chunk, pos, depth),
            _ => Ok(pos),
        }
    }

    pub(super) fn float_run<T: Float>(
        &mut self,
        chunk: &[u8],
        mut pos: usize,
        depth: usize,
    ) -> Result<usize, DecodeError> {
        let Some(builder) = builder_of(
            &mut self.data_root,
            &mut self.named,
            &mut self.request.inputs,
        ) else {
            return Ok(pos);
        };
        let Some((values, room, row_room)) = builder.float_run::<T>(depth) else {
            return Ok(pos);
        };
        let len = chunk.len();
        let mut added = 0;
        // After one region declines, the rest of this run is sequential:
        // retrying from every next value would rescan the region each time.
        let mut try_parallel = self.options.pool.is_some();
        let stop = loop {
            while pos < len && is_ws(chunk[pos]) {
                pos += 1;
            }
            let start = pos;
            // A full tensor, anything but a number, or the chunk's end: the
            // general path takes over (and words any error).
            if added == room || pos == len || !(chunk[pos].is_ascii_digit() || chunk[pos] == b'-') {
                break Ok(start);
            }
            // A long run of numbers in this chunk: several threads at once.
            // Within a nested row, only the rest of the row: the region then
            // ends about where the row should.
            let want = row_room.saturating_sub(added);
            if try_parallel && want > 0 && len - pos >= parallel::MIN_REGION_BYTES {
                if let Some(bytes) = parallel::region(&chunk[pos..]) {
                    let (used, n) = parallel::decode_region(
                        &chunk[pos..pos + bytes],
                        values,
                        want,
                        self.options.pool.as_ref(),
                    );
                    if n > 0 {
                        pos += used;
                        added += n;
                        self.expect = Expect::Value;
                        // Stopped early (the end of a row, say): the next
                        // region may go parallel again, as long as each one
                        // makes progress.
                        continue;
                    }
                    // Something unusual at once: the sequential path finds and words it.
                }
                try_parallel = false;
            }
            // The common case, many values at once.
            if len - pos >= number::PLAIN_WINDOW {
                let (used, n) = run::plain_run(&chunk[pos..], room - added, values);
                if n > 0 {
                    pos += used;
                    added += n;
                    self.expect = Expect::Value;
                    continue;
                }
            }
            let fast = number::scan_decimal(&chunk[pos..])
                .and_then(|d| T::from_decimal(d).map(|v| (v, d.len)));
            let value = match fast {
                Some((v, n)) => {
                    pos += n;
                    v
                }
                None => {
                    // The exact path: find the token, check it, convert it.
                    let end = chunk[pos..]
                        .iter()
                        .position(|&b| !is_bare(b))
                        .map_or(len, |n| pos + n);
                    let token = &chunk[start..end];
                    if end == len || token.get(1) == Some(&b'I') {
                        // Cut by the chunk end, or -Infinity.
                        break Ok(start);
                    }
                    if let Err(message) = number::check_grammar(token) {
                        let message = format!("{message}: {}", String::from_utf8_lossy(token));
                        break Err(syntax(self.base + start as u64, message));
                    }
                    pos = end;
                    T::from_token(token)
                }
            };
            values.push(value);
            added += 1;
            self.expect = Expect::AfterValue;
            // The separator json.dumps writes is ", ".
            if chunk.get(pos) == Some(&b',') {
                pos += 1;
                self.expect = Expect::Value;
                continue;
            }
            while pos < len && is_ws(chunk[pos]) {
                pos += 1;
            }
            if pos == len || chunk[pos] != b',' {
                break Ok(pos);
            }
            pos += 1;
            self.expect = Expect::Value;
        };
        builder.end_run(depth, added);
        stop.map_err(|e| e.with_input(self.input_name()))
    }

    pub(super) fn begin_bare(&mut self, chunk: &[u8], pos: usize) -> Result<usize, DecodeError> {
        let end = chunk[pos..]
            .iter()
            .position(|&b| !is_bare(b))
            .map_or(chunk.len(), |n| pos + n);
        let start = self.base + pos as u64;
        if end == chunk.len() {
            self.carry.clear();
            self.carry.extend_from_slice(&chunk[pos..]);
            self.partial = Partial::Bare { start };
            return Ok(end);
        }
        self.on_bare(&chunk[pos..end], start)?;
        Ok(end)
    }

    pub(super) fn continue_bare(&mut self, chunk: &[u8]) -> Result<usize, DecodeError> {
        let Partial::Bare { start } = self.partial else {
            return Ok(0);
        };
        let end = chunk
            .iter()
            .position(|&b| !is_bare(b))
            .unwrap_or(chunk.len());
        if self.carry.len() + end > MAX_TOKEN_BYTES {
            return Err(DecodeError::new(
                Category::Limit,
                start,
                format!("a number or literal is longer than {MAX_TOKEN_BYTES} bytes"),
            ));
        }
        self.carry.extend_from_slice(&chunk[..end]);
        if end < chunk.len() {
            self.finish_bare()?;
        }
        Ok(end)
    }

    pub(super) fn finish_bare(&mut self) -> Result<(), DecodeError> {
        let Partial::Bare { start } = std::mem::replace(&mut self.partial, Partial::None) else {
            return Ok(());
        };
        let carry = std::mem::take(&mut self.carry);
        let result = self.on_bare(&carry, start);
        self.carry = carry;
        result
    }

    pub(super) fn on_bare(&mut self, token: &[u8], at: u64) -> Result<(), DecodeError> {
        let scalar = match token {
            b"true" => Scalar::Bool(true),
            b"false" => Scalar::Bool(false),
            b"null" => Scalar::Null,
            b"NaN" | b"Infinity" | b"-Infinity" => {
                if self.options.strict {
                    return Err(syntax(
                        at,
                        format!(
                            "{} is not JSON (strict mode)",
                            String::from_utf8_lossy(token)
                        ),
                    )
                    .with_input(self.input_name()));
                }
                Scalar::NonFinite(match token {
                    b"NaN" => f64::NAN,
                    b"Infinity" => f64::INFINITY,
                    _ => f64::NEG_INFINITY,
                })
            }
            // Anything else that starts like a number gets the grammar's verdict.
            _ if matches!(token[0], b'0'..=b'9' | b'-' | b'+' | b'.') => Scalar::Number(token),
            _ => {
                let message = format!("unknown literal '{}'", String::from_utf8_lossy(token));
                return Err(syntax(at, message).with_input(self.input_name()));
            }
        };
        self.on_scalar(scalar, at)
    }

    pub(super) fn begin_string(&mut self, is_key: bool, at: u64) {
        let keep = if is_key {
            !matches!(
                self.stack.last().map(|f| f.ctx),
                Some(Ctx::Skip | Ctx::Capture)
            )
        } else {
            !matches!(self.slot(), Slot::Ignore)
        };
        self.scratch.clear();
        self.partial = Partial::String {
            scanner: StringScanner::default(),
            is_key,
            keep,
            start: at,
        };
    }

    pub(super) fn continue_string(
        &mut self,
        chunk: &[u8],
        pos: usize,
    ) -> Result<usize, DecodeError> {
        let Partial::String {
            scanner,
            keep,
            start,
            ..
        } = &mut self.partial
        else {
            return Ok(pos);
        };
        let (keep, start) = (*keep, *start);
        let out = if keep { Some(&mut self.scratch) } else { None };
        match scanner.scan(&chunk[pos..], out, self.options.limits.max_string_bytes) {
            Ok(Scan::Open) => Ok(chunk.len()),
            Ok(Scan::Closed(n)) => {
                let Partial::String { is_key, .. } =
                    std::mem::replace(&mut self.partial, Partial::None)
                else {
                    unreachable!()
                };
                let text = std::mem::take(&mut self.scratch);
                let result = if is_key {
                    self.on_key(&text, start)
                } else {
                    self.on_scalar(Scalar::String(&text), start)
                };
                self.scratch = text;
                result.map(|()| pos + n)
            }
            Err(e) => {
                let at = self.base + (pos + e.at) as u64;
                let error = if e.limit {
                    DecodeError::limit(at, self.options.limits.string_too_long())
                } else {
                    DecodeError::new(Category::Syntax, at, e.message)
                };
                Err(error.with_input(self.input_name()))
            }
        }
    }
}
