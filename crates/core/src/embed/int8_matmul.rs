//! Int8 matrix products for a model whose weights are stored in int8 but multiplied in f32.
//!
//! The default MiniLM keeps each weight matrix as int8 with a scale per column, turned back into
//! f32 by `Cast` and `Mul` just before its `MatMul`; ONNX Runtime folds those into f32 constants
//! at load, so every product runs in f32 (64% of the model's time here, measured with its
//! profiler) and this CPU's int8 instructions (AVX-512 VNNI) sit idle. This rewrite gives each
//! such `MatMul` the int8 form ONNX Runtime fuses into its int8 kernels
//! (`DynamicQuantizeMatMul`): the activations quantised per run (`DynamicQuantizeLinear`),
//! `MatMulInteger` with the stored int8 weights, then the two scales. The weights stay in int8,
//! so a session also holds a quarter of the memory for them.
//!
//! It works on the protobuf wire format, not a schema: every field it does not touch is copied
//! byte for byte, so nothing of the model it does not understand is lost. Anything unexpected
//! leaves the model as it is.

/// A protobuf field's value as it appears on the wire.
#[derive(Clone, Copy)]
enum Value<'a> {
    Varint(u64),
    Fixed64(&'a [u8]),
    Bytes(&'a [u8]),
    Fixed32(&'a [u8]),
}

/// One field of a message: its number and value, in wire order.
type Field<'a> = (u32, Value<'a>);

fn read_varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *bytes.get(*at)?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// The fields of one message; `None` when it is not valid protobuf (or uses groups).
fn fields(bytes: &[u8]) -> Option<Vec<Field<'_>>> {
    let mut at = 0;
    let mut out = Vec::new();
    while at < bytes.len() {
        let key = read_varint(bytes, &mut at)?;
        let number = u32::try_from(key >> 3).ok()?;
        let take = |at: &mut usize, n: usize| {
            let slice = bytes.get(*at..at.checked_add(n)?)?;
            *at += n;
            Some(slice)
        };
        let value = match key & 7 {
            0 => Value::Varint(read_varint(bytes, &mut at)?),
            1 => Value::Fixed64(take(&mut at, 8)?),
            2 => {
                let len = usize::try_from(read_varint(bytes, &mut at)?).ok()?;
                Value::Bytes(take(&mut at, len)?)
            }
            5 => Value::Fixed32(take(&mut at, 4)?),
            _ => return None,
        };
        out.push((number, value));
    }
    Some(out)
}

fn write_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn write_field(out: &mut Vec<u8>, number: u32, value: Value<'_>) {
    let (wire, payload): (u64, &[u8]) = match value {
        Value::Varint(v) => {
            write_varint(out, u64::from(number) << 3);
            write_varint(out, v);
            return;
        }
        Value::Fixed64(b) => (1, b),
        Value::Bytes(b) => (2, b),
        Value::Fixed32(b) => (5, b),
    };
    write_varint(out, (u64::from(number) << 3) | wire);
    if wire == 2 {
        write_varint(out, payload.len() as u64);
    }
    out.extend_from_slice(payload);
}

fn encode(fields: &[Field<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    for (number, value) in fields {
        write_field(&mut out, *number, *value);
    }
    out
}

fn text(value: Value<'_>) -> Option<&str> {
    match value {
        Value::Bytes(b) => std::str::from_utf8(b).ok(),
        _ => None,
    }
}

// Field numbers of onnx.proto.
const MODEL_GRAPH: u32 = 7;
const MODEL_OPSET: u32 = 8;
const OPSET_DOMAIN: u32 = 1;
const OPSET_VERSION: u32 = 2;
const GRAPH_NODE: u32 = 1;
const GRAPH_INITIALIZER: u32 = 5;
const NODE_INPUT: u32 = 1;
const NODE_OUTPUT: u32 = 2;
const NODE_NAME: u32 = 3;
const NODE_OP_TYPE: u32 = 4;
const NODE_ATTRIBUTE: u32 = 5;
const NODE_DOMAIN: u32 = 7;
const TENSOR_DIMS: u32 = 1;
const TENSOR_DATA_TYPE: u32 = 2;
const TENSOR_NAME: u32 = 8;
const ATTRIBUTE_NAME: u32 = 1;
const ATTRIBUTE_INT: u32 = 3;
const ATTRIBUTE_TYPE: u32 = 20;
/// `TensorProto.DataType`.
const FLOAT: u64 = 1;
const INT8: u64 = 3;
/// `AttributeProto.AttributeType.INT`.
const ATTRIBUTE_TYPE_INT: u64 = 2;
/// `DynamicQuantizeLinear` came with opset 11.
const MIN_OPSET: u64 = 11;

/// What the rewrite needs of a node.
struct Node<'a> {
    op_type: &'a str,
    domain: &'a str,
    inputs: Vec<&'a str>,
    outputs: Vec<&'a str>,
}

fn node(bytes: &[u8]) -> Option<Node<'_>> {
    let mut node = Node {
        op_type: "",
        domain: "",
        inputs: Vec::new(),
        outputs: Vec::new(),
    };
    for (number, value) in fields(bytes)? {
        match number {
            NODE_INPUT => node.inputs.push(text(value)?),
            NODE_OUTPUT => node.outputs.push(text(value)?),
            NODE_OP_TYPE => node.op_type = text(value)?,
            NODE_DOMAIN => node.domain = text(value)?,
            _ => {}
        }
    }
    Some(node)
}

/// What the rewrite needs of an initializer.
struct Tensor<'a> {
    data_type: u64,
    dims: Vec<u64>,
    fields: Vec<Field<'a>>,
}

fn tensor(bytes: &[u8]) -> Option<(&str, Tensor<'_>)> {
    let fields = fields(bytes)?;
    let mut name = None;
    let mut tensor = Tensor {
        data_type: 0,
        dims: Vec::new(),
        fields: Vec::new(),
    };
    for &(number, value) in &fields {
        match (number, value) {
            (TENSOR_NAME, v) => name = Some(text(v)?),
            (TENSOR_DATA_TYPE, Value::Varint(t)) => tensor.data_type = t,
            (TENSOR_DIMS, Value::Varint(d)) => tensor.dims.push(d),
            // Packed dims.
            (TENSOR_DIMS, Value::Bytes(b)) => {
                let mut at = 0;
                while at < b.len() {
                    tensor.dims.push(read_varint(b, &mut at)?);
                }
            }
            _ => {}
        }
    }
    tensor.fields = fields;
    Some((name?, tensor))
}

/// A new node, encoded.
fn new_node(name: &str, op_type: &str, inputs: &[&str], outputs: &[&str]) -> Vec<u8> {
    let mut fields: Vec<Field<'_>> = Vec::new();
    fields.extend(
        inputs
            .iter()
            .map(|i| (NODE_INPUT, Value::Bytes(i.as_bytes()))),
    );
    fields.extend(
        outputs
            .iter()
            .map(|o| (NODE_OUTPUT, Value::Bytes(o.as_bytes()))),
    );
    fields.push((NODE_NAME, Value::Bytes(name.as_bytes())));
    fields.push((NODE_OP_TYPE, Value::Bytes(op_type.as_bytes())));
    encode(&fields)
}

/// `Cast` to f32, encoded.
fn cast_to_float(name: &str, input: &str, output: &str) -> Vec<u8> {
    let to = encode(&[
        (ATTRIBUTE_NAME, Value::Bytes(b"to")),
        (ATTRIBUTE_INT, Value::Varint(FLOAT)),
        (ATTRIBUTE_TYPE, Value::Varint(ATTRIBUTE_TYPE_INT)),
    ]);
    let mut bytes = new_node(name, "Cast", &[input], &[output]);
    write_field(&mut bytes, NODE_ATTRIBUTE, Value::Bytes(&to));
    bytes
}

/// A weight stored in int8 and scaled to f32 right before one `MatMul`.
struct Int8Weight<'a> {
    /// The int8 initializer, `[K, N]`.
    quantized: &'a str,
    /// The f32 scales, `[1, N]` or `[N]`.
    scale: &'a str,
    /// The `Cast` and `Mul` nodes (indices) that make the f32 weight, used by nothing else.
    unfolding: [usize; 2],
}

/// The model with every `MatMul` of an int8-stored weight made an int8 product, and how many
/// were; `None` when there is none, or anything about the model is unexpected.
pub(crate) fn rewrite(model: &[u8]) -> Option<(Vec<u8>, usize)> {
    let top = fields(model)?;
    let opset_ok = top.iter().any(|&(number, value)| {
        number == MODEL_OPSET
            && matches!(value, Value::Bytes(b) if default_opset(b).is_some_and(|v| v >= MIN_OPSET))
    });
    if !opset_ok {
        return None;
    }
    let (graph_at, graph_bytes) = top.iter().enumerate().find_map(|(i, &(n, v))| match v {
        Value::Bytes(b) if n == MODEL_GRAPH => Some((i, b)),
        _ => None,
    })?;
    let (graph, count) = rewrite_graph(graph_bytes)?;
    let mut out = top.clone();
    out[graph_at] = (MODEL_GRAPH, Value::Bytes(&graph));
    Some((encode(&out), count))
}

/// The default domain's opset version in an `OperatorSetIdProto`, if it is that domain's.
fn default_opset(bytes: &[u8]) -> Option<u64> {
    let mut domain = "";
    let mut version = None;
    for (number, value) in fields(bytes)? {
        match (number, value) {
            (OPSET_DOMAIN, v) => domain = text(v)?,
            (OPSET_VERSION, Value::Varint(v)) => version = Some(v),
            _ => {}
        }
    }
    (domain.is_empty() || domain == "ai.onnx").then_some(version?)
}

fn rewrite_graph(bytes: &[u8]) -> Option<(Vec<u8>, usize)> {
    let graph = fields(bytes)?;
    let mut nodes: Vec<Node<'_>> = Vec::new();
    let mut tensors: std::collections::HashMap<&str, Tensor<'_>> = Default::default();
    for &(number, value) in &graph {
        match (number, value) {
            (GRAPH_NODE, Value::Bytes(b)) => nodes.push(node(b)?),
            (GRAPH_INITIALIZER, Value::Bytes(b)) => {
                let (name, t) = tensor(b)?;
                tensors.insert(name, t);
            }
            _ => {}
        }
    }
    let mut producer: std::collections::HashMap<&str, usize> = Default::default();
    let mut uses: std::collections::HashMap<&str, usize> = Default::default();
    for (i, n) in nodes.iter().enumerate() {
        for o in &n.outputs {
            producer.insert(o, i);
        }
        for input in &n.inputs {
            *uses.entry(input).or_default() += 1;
        }
    }
    let int8_weight = |value: &str| -> Option<Int8Weight<'_>> {
        let mul = *producer.get(value)?;
        let m = &nodes[mul];
        if m.op_type != "Mul"
            || !m.domain.is_empty()
            || m.inputs.len() != 2
            || uses.get(value) != Some(&1)
        {
            return None;
        }
        let cast = *producer.get(m.inputs[0])?;
        let c = &nodes[cast];
        if c.op_type != "Cast" || c.inputs.len() != 1 || uses.get(m.inputs[0]) != Some(&1) {
            return None;
        }
        let (quantized, scale) = (c.inputs[0], m.inputs[1]);
        let (q, s) = (tensors.get(quantized)?, tensors.get(scale)?);
        let columns = *q.dims.get(1)?;
        let per_column = matches!(s.dims.as_slice(), [1, n] | [n] if *n == columns);
        (q.data_type == INT8 && q.dims.len() == 2 && s.data_type == FLOAT && per_column).then_some(
            Int8Weight {
                quantized,
                scale,
                unfolding: [cast, mul],
            },
        )
    };
    let mut replaced: std::collections::HashMap<usize, Int8Weight<'_>> = Default::default();
    for (i, n) in nodes.iter().enumerate() {
        if n.op_type == "MatMul" && n.domain.is_empty() && n.inputs.len() == 2 {
            if let Some(w) = int8_weight(n.inputs[1]) {
                replaced.insert(i, w);
            }
        }
    }
    if replaced.is_empty() {
        return None;
    }
    let dropped: std::collections::HashSet<usize> =
        replaced.values().flat_map(|w| w.unfolding).collect();

    // The graph again, in order: each replaced MatMul becomes its five nodes in place; the
    // scales it needs as vectors are added after the other initializers.
    let mut made: Vec<Vec<u8>> = Vec::new();
    let mut new_scales: Vec<Vec<u8>> = Vec::new();
    let mut out: Vec<(u32, usize, Option<Value<'_>>)> = Vec::new();
    let mut node_index = 0;
    for &(number, value) in &graph {
        if number != GRAPH_NODE {
            out.push((number, usize::MAX, Some(value)));
            continue;
        }
        let i = node_index;
        node_index += 1;
        if dropped.contains(&i) {
            continue;
        }
        let Some(w) = replaced.get(&i) else {
            out.push((number, usize::MAX, Some(value)));
            continue;
        };
        let n = &nodes[i];
        let p = format!("quarry_int8_{i}_");
        let name = |s: &str| format!("{p}{s}");
        let (aq, a_scale, a_zero, y32, yf, scale, column_scale) = (
            name("a_q"),
            name("a_scale"),
            name("a_zero"),
            name("y_i32"),
            name("y_f32"),
            name("scale"),
            name("w_scale"),
        );
        for bytes in [
            new_node(
                &name("quantize"),
                "DynamicQuantizeLinear",
                &[n.inputs[0]],
                &[&aq, &a_scale, &a_zero],
            ),
            new_node(
                &name("matmul"),
                "MatMulInteger",
                &[&aq, w.quantized, &a_zero],
                &[&y32],
            ),
            cast_to_float(&name("cast"), &y32, &yf),
            new_node(
                &name("scales"),
                "Mul",
                &[&a_scale, &column_scale],
                &[&scale],
            ),
            new_node(&name("scale"), "Mul", &[&yf, &scale], &n.outputs),
        ] {
            made.push(bytes);
            out.push((GRAPH_NODE, made.len() - 1, None));
        }
        new_scales.push(as_vector(&tensors[w.scale], &column_scale));
    }
    let mut encoded = Vec::with_capacity(bytes.len() + 4096);
    for (number, made_at, value) in out {
        match value {
            Some(v) => write_field(&mut encoded, number, v),
            None => write_field(&mut encoded, number, Value::Bytes(&made[made_at])),
        }
    }
    for scale in &new_scales {
        write_field(&mut encoded, GRAPH_INITIALIZER, Value::Bytes(scale));
    }
    Some((encoded, replaced.len()))
}

/// A copy of a `[1, N]` (or `[N]`) scale tensor as `[N]`, named `name`: the shape ONNX
/// Runtime's int8 fusion takes for per-column scales.
fn as_vector(scale: &Tensor<'_>, name: &str) -> Vec<u8> {
    let columns = *scale.dims.last().unwrap_or(&0);
    let mut fields: Vec<Field<'_>> = vec![
        (TENSOR_DIMS, Value::Varint(columns)),
        (TENSOR_NAME, Value::Bytes(name.as_bytes())),
    ];
    fields.extend(
        scale
            .fields
            .iter()
            .filter(|(number, _)| *number != TENSOR_DIMS && *number != TENSOR_NAME)
            .copied(),
    );
    encode(&fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny model: `y = x · (f32(Wq) * s)` with a 2×3 int8 weight, opset 17.
    fn tiny_model(weight_type: u64) -> Vec<u8> {
        let tensor = |name: &str, data_type: u64, dims: &[u64], raw: &[u8]| {
            let mut f: Vec<Field<'_>> = dims
                .iter()
                .map(|d| (TENSOR_DIMS, Value::Varint(*d)))
                .collect();
            f.push((TENSOR_DATA_TYPE, Value::Varint(data_type)));
            f.push((TENSOR_NAME, Value::Bytes(name.as_bytes())));
            f.push((9, Value::Bytes(raw)));
            encode(&f)
        };
        let scales: Vec<u8> = [0.5f32, 0.25, 2.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let nodes = [
            cast_to_float("c", "wq", "wf"),
            new_node("m", "Mul", &["wf", "ws"], &["w"]),
            new_node("mm", "MatMul", &["x", "w"], &["y"]),
        ];
        let inits = [
            tensor("wq", weight_type, &[2, 3], &[1, 2, 3, 4, 5, 6]),
            tensor("ws", FLOAT, &[1, 3], &scales),
        ];
        let mut graph: Vec<Field<'_>> = nodes
            .iter()
            .map(|n| (GRAPH_NODE, Value::Bytes(n.as_slice())))
            .collect();
        graph.push((2, Value::Bytes(b"g")));
        graph.extend(
            inits
                .iter()
                .map(|t| (GRAPH_INITIALIZER, Value::Bytes(t.as_slice()))),
        );
        let graph = encode(&graph);
        let opset = encode(&[(OPSET_VERSION, Value::Varint(17))]);
        encode(&[
            (1, Value::Varint(8)),
            (MODEL_GRAPH, Value::Bytes(&graph)),
            (MODEL_OPSET, Value::Bytes(&opset)),
        ])
    }

    fn ops(model: &[u8]) -> Vec<String> {
        let top = fields(model).unwrap();
        let graph = top
            .iter()
            .find_map(|&(n, v)| match v {
                Value::Bytes(b) if n == MODEL_GRAPH => Some(b),
                _ => None,
            })
            .unwrap();
        fields(graph)
            .unwrap()
            .into_iter()
            .filter_map(|(n, v)| match v {
                Value::Bytes(b) if n == GRAPH_NODE => Some(node(b).unwrap().op_type.to_string()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn an_int8_stored_weight_becomes_an_int8_product_and_the_rest_is_kept() {
        let model = tiny_model(INT8);
        let (rewritten, count) = rewrite(&model).unwrap();
        assert_eq!(count, 1);
        assert_eq!(
            ops(&rewritten),
            [
                "DynamicQuantizeLinear",
                "MatMulInteger",
                "Cast",
                "Mul",
                "Mul"
            ]
        );
        // Fields it does not touch (the IR version, the graph's name, the opset) are kept.
        let top = fields(&rewritten).unwrap();
        assert!(matches!(top[0], (1, Value::Varint(8))));
        assert_eq!(
            fields(&rewritten).unwrap().len(),
            fields(&model).unwrap().len()
        );
        // The last MatMul node's output is the original's.
        let graph = match top[1].1 {
            Value::Bytes(b) => fields(b).unwrap(),
            _ => panic!(),
        };
        let last_node = graph
            .iter()
            .filter_map(|&(n, v)| match v {
                Value::Bytes(b) if n == GRAPH_NODE => Some(node(b).unwrap()),
                _ => None,
            })
            .next_back()
            .unwrap();
        assert_eq!(last_node.outputs, ["y"]);
        // The per-column scale is added as a vector.
        let (name, scale) = graph
            .iter()
            .filter_map(|&(n, v)| match v {
                Value::Bytes(b) if n == GRAPH_INITIALIZER => tensor(b),
                _ => None,
            })
            .next_back()
            .unwrap();
        assert_eq!(
            (name, scale.dims.as_slice()),
            ("quarry_int8_2_w_scale", &[3u64][..])
        );
    }

    #[test]
    fn a_model_without_int8_stored_weights_or_not_protobuf_is_left_alone() {
        // A uint8 weight is not the pattern.
        assert!(rewrite(&tiny_model(2)).is_none());
        assert!(rewrite(b"not a model \xff\xff\xff").is_none());
        assert!(rewrite(&[]).is_none());
    }
}
