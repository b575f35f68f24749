//! Triton's binary tensor data extension: a JSON header then raw tensor
//! bytes (`read_binary`), or a body that is one raw input (`read_raw`),
//! copied as they arrive into the tensors the header announced.

use super::*;

/// Copies the raw bytes that follow the JSON header into the binary
/// inputs' tensors, in order. `after_header` is what `Content-Length` says
/// is left after the header, when it says.
pub(super) async fn read_binary(
    reader: &mut BodyReader,
    request: &mut InferRequest,
    mut leftover: Bytes,
    after_header: Option<u64>,
    max_element: usize,
) -> Result<(), Error> {
    let total = request
        .binary_inputs
        .iter()
        .try_fold(0u64, |sum, b| sum.checked_add(b.size as u64));
    let Some(total) = total.filter(|&t| t <= reader.limit()) else {
        return Err(too_large(reader.limit()));
    };
    if let Some(rest) = after_header {
        if total != rest {
            return Err(Error::malformed(format!(
                "the inputs' binary_data_size values add up to {total} bytes, but the body has \
                 {rest} bytes after its {}-byte JSON header (Content-Length minus \
                 Inference-Header-Content-Length)",
                reader.received().saturating_sub(leftover.len() as u64),
            )));
        }
    }
    for binary in &request.binary_inputs {
        let tensor = &mut request.inputs[binary.input];
        let count = element_count(&tensor.shape).expect("the decoder counted the shape");
        let invalid = |e: RawError| e.for_input(&tensor.name);
        let mut filler =
            RawFiller::new(tensor.datatype(), count, binary.size, max_element).map_err(invalid)?;
        while filler.remaining() > 0 {
            if leftover.is_empty() {
                leftover = reader.next().await?.ok_or_else(|| {
                    Error::malformed(format!(
                        "the body ended {} bytes into the {} bytes of binary data of input '{}'",
                        binary.size - filler.remaining(),
                        binary.size,
                        tensor.name
                    ))
                })?;
            }
            let part = leftover.split_to(filler.remaining().min(leftover.len()));
            timed(&mut reader.decode, || filler.push(&part)).map_err(invalid)?;
        }
        tensor.data = filler.finish().map_err(invalid)?;
    }
    let mut extra = leftover.len() as u64;
    while let Some(frame) = reader.next().await? {
        extra += frame.len() as u64;
    }
    if extra > 0 {
        return Err(Error::malformed(format!(
            "the body has {extra} bytes after the binary data that the inputs' \
             binary_data_size values account for"
        )));
    }
    Ok(())
}

/// Reads a raw body (`Inference-Header-Content-Length: 0`): the bytes of the
/// model's only input, whose shape follows from the byte count.
pub(super) async fn read_raw(
    reader: &mut BodyReader,
    declared: Option<u64>,
    model: &ModelMetadata,
    options: &DecodeOptions,
) -> Result<InferRequest, Error> {
    let [spec] = model.inputs.as_slice() else {
        return Err(Error::invalid_input(format!(
            "a raw binary body (Inference-Header-Content-Length: 0) needs a model with exactly \
             one input; model '{}' has {}",
            model.name,
            model.inputs.len()
        )));
    };
    let Some(element) = spec.datatype.element_size() else {
        return read_raw_string(reader, spec, options).await;
    };
    // Without Content-Length the size is known only at the end, so the body
    // is gathered first (within the limit); otherwise it goes straight into
    // the tensor.
    let gathered = match declared {
        Some(_) => None,
        None => {
            let mut all = Vec::new();
            while let Some(frame) = reader.next().await? {
                all.extend_from_slice(&frame);
            }
            Some(all)
        }
    };
    let size = declared.map_or_else(|| gathered.as_ref().map_or(0, Vec::len), |n| n as usize);
    let shape = raw_shape(spec, size, element)?;
    let count = element_count(&shape).expect("derived from a byte count");
    // The same request limits as every other input, before allocating.
    TensorBudget::default()
        .take_shape(&options.limits, spec.datatype, &shape)
        .map_err(|e| e.in_input(&spec.name))?;
    let invalid = |e: RawError| e.for_input(&spec.name);
    let mut filler = RawFiller::new(spec.datatype, count, size, 0).map_err(invalid)?;
    if let Some(all) = gathered {
        timed(&mut reader.decode, || filler.push(&all)).map_err(invalid)?;
    } else {
        while let Some(frame) = reader.next().await? {
            if frame.len() > filler.remaining() {
                return Err(Error::malformed(
                    "the body is longer than its Content-Length".to_owned(),
                ));
            }
            timed(&mut reader.decode, || filler.push(&frame)).map_err(invalid)?;
        }
    }
    let data = filler.finish().map_err(invalid)?;
    Ok(InferRequest {
        inputs: vec![Tensor {
            name: spec.name.clone(),
            shape,
            data,
            parameters: Vec::new(),
        }],
        ..InferRequest::default()
    })
}

/// A raw body for a BYTES input: the whole body is its one element, as
/// Triton reads it, for an input that holds one element (`[1]`, or
/// variable dimensions, each taken as 1).
async fn read_raw_string(
    reader: &mut BodyReader,
    spec: &TensorSpec,
    options: &DecodeOptions,
) -> Result<InferRequest, Error> {
    let shape: Vec<usize> = spec.shape.iter().map(|&d| d.max(1) as usize).collect();
    if shape.iter().product::<usize>() != 1 {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "a raw binary body is one element of input '{}', which takes {} ({} {}); send \
                 a JSON header with binary_data_size",
                spec.name,
                shape.iter().product::<usize>(),
                spec.datatype,
                spec.shape_display()
            ),
        ));
    }
    let mut all = Vec::new();
    while let Some(frame) = reader.next().await? {
        options
            .limits
            .check_string(all.len() + frame.len())
            .map_err(|e| e.in_input(&spec.name))?;
        all.extend_from_slice(&frame);
    }
    TensorBudget::default()
        .take_shape(&options.limits, spec.datatype, &shape)
        .map_err(|e| e.in_input(&spec.name))?;
    Ok(InferRequest {
        inputs: vec![Tensor {
            name: spec.name.clone(),
            shape,
            data: wirespeed_core::TensorData::Bytes(vec![all]),
            parameters: Vec::new(),
        }],
        ..InferRequest::default()
    })
}

/// The shape of a raw input of `size` bytes: the spec's, with its one
/// variable dimension (if any) worked out from the element count.
pub(super) fn raw_shape(
    spec: &TensorSpec,
    size: usize,
    element: usize,
) -> Result<Vec<usize>, Error> {
    let wrong = |why: String| {
        Error::invalid_input(format!(
            "a raw body of {size} bytes does not fit input '{}' ({} {}): {why}",
            spec.name,
            spec.datatype,
            spec.shape_display()
        ))
    };
    if !size.is_multiple_of(element) {
        return Err(wrong(format!(
            "it is not a whole number of {element}-byte elements"
        )));
    }
    let count = size / element;
    let fixed: usize = spec
        .shape
        .iter()
        .filter(|&&d| d >= 0)
        .map(|&d| d as usize)
        .product();
    let variable = spec.shape.iter().filter(|&&d| d < 0).count();
    let free = match variable {
        0 if fixed == count => 0,
        0 => {
            return Err(wrong(format!(
                "the shape takes {fixed} elements, not {count}"
            )))
        }
        1 if fixed > 0 && count.is_multiple_of(fixed) => count / fixed,
        1 => {
            return Err(wrong(format!(
                "{count} elements are not a multiple of {fixed}"
            )))
        }
        _ => {
            return Err(wrong(
                "the shape has more than one variable dimension, so the body cannot say it"
                    .to_owned(),
            ))
        }
    };
    Ok(spec
        .shape
        .iter()
        .map(|&d| if d < 0 { free } else { d as usize })
        .collect())
}
