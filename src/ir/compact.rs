//! plan.compact.json: the IR with each rank's instruction list as one string of short tokens,
//! about ten bytes an instruction instead of plan.json's hundred and twenty. Everything else
//! (pipeline, regions, stages, owner, rank_map) is written as plan.json writes it.
//!
//! A token is an op letter and the instruction's present fields, in the IR's field order:
//! `Fs3m17` is `forward` of stage 3, microbatch 17; `Ss3m17p2a` sends its activation to rank 2;
//! `APrenc` all-reduces region `enc` over the pipeline group. Tokens are separated by one space.
//! The encoder is a serde serializer over `Instr`'s derived `Serialize`, so an optional field
//! added to `Instr` flows through as an extension (`;name:12`, `;name=text`, `;name`) with no
//! edit here; docs/plan-formats.md is the grammar, and the torch runtime reads it.

use std::fmt::{self, Write};

use serde::Serialize;
use serde::ser::{self, Impossible};

use super::{Instr, Pipeline, PlanIr, RankCoord, RegionIr, StageIr};

pub const FORMAT: &str = "mpipe-ir-compact";
pub const VERSION: u32 = 1;

/// (op letter, op name): the letters of the token grammar.
const OPS: &[(char, &str)] = &[
    ('F', "forward"),
    ('B', "backward"),
    ('I', "backward_input"),
    ('W', "backward_weight"),
    ('S', "send"),
    ('R', "recv"),
    ('A', "all_reduce"),
    ('O', "optimizer_step"),
];

/// (field, letter, values): fields with a one-letter tag. A numeric field's letter is followed
/// by its digits; an enum field's letter *is* its value, from the value's name.
const NUMBERS: &[(&str, char)] = &[("stage", 's'), ("mb", 'm'), ("peer", 'p')];
const ENUMS: &[(&str, &[(char, &str)])] =
    &[("dir", &[('a', "act"), ('g', "grad")]), ("group", &[('P', "pp"), ('D', "dp")])];

#[derive(Serialize)]
struct View<'a> {
    format: &'static str,
    version: u32,
    source: &'a str,
    pipeline: &'a Pipeline,
    regions: &'a [RegionIr],
    stages: &'a [StageIr],
    owner: &'a std::collections::BTreeMap<String, Vec<u32>>,
    rank_map: &'a [RankCoord],
    ranks: Vec<RankView<'a>>,
}

#[derive(Serialize)]
struct RankView<'a> {
    rank: u32,
    /// A lookahead plan's prologue, as tokens too.
    #[serde(skip_serializing_if = "is_empty")]
    prologue: Code<'a>,
    count: usize,
    code: Code<'a>,
}

fn is_empty(code: &Code) -> bool {
    code.0.is_empty()
}

/// A rank's instructions, serialised as one string.
struct Code<'a>(&'a [Instr]);

impl Serialize for Code<'_> {
    fn serialize<S: ser::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // Formatted whole first (about 12 bytes an instruction of one rank): serde_json then
        // scans it for escapes at once instead of token by token, several times faster.
        let mut code = String::with_capacity(12 * self.0.len());
        for (k, i) in self.0.iter().enumerate() {
            if k > 0 {
                code.push(' ');
            }
            i.serialize(Token { out: &mut code }).map_err(ser::Error::custom)?;
        }
        s.serialize_str(&code)
    }
}

/// The compact plan into `out`.
pub fn write(ir: &PlanIr, out: &mut impl std::io::Write) -> std::io::Result<()> {
    // Destructured so a field added to PlanIr fails to compile here until the view carries it.
    let PlanIr { format: _, version: _, source, pipeline, regions, stages, owner, rank_map, ranks } = ir;
    let view = View {
        format: FORMAT,
        version: VERSION,
        source,
        pipeline,
        regions,
        stages,
        owner,
        rank_map,
        ranks: ranks
            .iter()
            .map(|r| RankView {
                rank: r.rank,
                prologue: Code(&r.prologue),
                count: r.instructions.len(),
                code: Code(&r.instructions),
            })
            .collect(),
    };
    serde_json::to_writer_pretty(&mut *out, &view)?;
    out.write_all(b"\n")
}

/// Why an instruction has no token: a value kind the grammar lacks (a float, a list).
#[derive(Debug)]
pub struct Unencodable(String);

impl fmt::Display for Unencodable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Unencodable {}

impl ser::Error for Unencodable {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Unencodable(msg.to_string())
    }
}

impl From<fmt::Error> for Unencodable {
    fn from(_: fmt::Error) -> Self {
        Unencodable("the output refused a write".into())
    }
}

fn unsupported(what: &str) -> Unencodable {
    Unencodable(format!("the compact plan encoding has no {what} values"))
}

/// Characters a region name or an extension's text keeps as they are; others are `%XX`.
fn plain(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.')
}

fn escaped(out: &mut dyn Write, text: &str) -> fmt::Result {
    for &b in text.as_bytes() {
        if plain(b) {
            out.write_char(b as char)?;
        } else {
            write!(out, "%{b:02X}")?;
        }
    }
    Ok(())
}

/// Serializer methods for values a token cannot be made of: an instruction is a struct.
macro_rules! refuse {
    ($($method:ident: $ty:ty),*) => {
        $(fn $method(self, _: $ty) -> Result<(), Unencodable> {
            Err(unsupported("bare"))
        })*
    };
}

/// Serialises an `Instr` as its token.
struct Token<'o> {
    out: &'o mut dyn Write,
}

/// The serializer methods of the values a token cannot hold (lists, maps, struct variants),
/// shared by the instruction's serializer and its fields'.
macro_rules! no_compound_values {
    () => {
        fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, Unencodable> {
            Err(unsupported("list"))
        }
        fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeTupleStruct, Unencodable> {
            Err(unsupported("list"))
        }
        fn serialize_tuple_variant(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: usize,
        ) -> Result<Self::SerializeTupleVariant, Unencodable> {
            Err(unsupported("list"))
        }
        fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, Unencodable> {
            Err(unsupported("map"))
        }
        fn serialize_struct_variant(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: usize,
        ) -> Result<Self::SerializeStructVariant, Unencodable> {
            Err(unsupported("struct"))
        }
    };
}

impl<'o> ser::Serializer for Token<'o> {
    type Ok = ();
    type Error = Unencodable;
    type SerializeSeq = Impossible<(), Unencodable>;
    type SerializeTuple = Impossible<(), Unencodable>;
    type SerializeTupleStruct = Impossible<(), Unencodable>;
    type SerializeTupleVariant = Impossible<(), Unencodable>;
    type SerializeMap = Impossible<(), Unencodable>;
    type SerializeStruct = Self;
    type SerializeStructVariant = Impossible<(), Unencodable>;

    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self, Unencodable> {
        Ok(self)
    }

    refuse!(serialize_bool: bool, serialize_i8: i8, serialize_i16: i16, serialize_i32: i32, serialize_i64: i64,
            serialize_u8: u8, serialize_u16: u16, serialize_u32: u32, serialize_u64: u64, serialize_f32: f32,
            serialize_f64: f64, serialize_char: char, serialize_str: &str);

    fn serialize_bytes(self, _: &[u8]) -> Result<(), Unencodable> {
        Err(unsupported("byte"))
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, Unencodable> {
        Err(unsupported("list"))
    }
    fn serialize_none(self) -> Result<(), Unencodable> {
        Err(unsupported("bare"))
    }
    fn serialize_some<T: ?Sized + Serialize>(self, _: &T) -> Result<(), Unencodable> {
        Err(unsupported("bare"))
    }
    fn serialize_unit(self) -> Result<(), Unencodable> {
        Err(unsupported("bare"))
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Unencodable> {
        Err(unsupported("bare"))
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Result<(), Unencodable> {
        Err(unsupported("bare"))
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(self, _: &'static str, _: &T) -> Result<(), Unencodable> {
        Err(unsupported("newtype"))
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<(), Unencodable> {
        Err(unsupported("newtype"))
    }
    no_compound_values!();
}

impl ser::SerializeStruct for Token<'_> {
    type Ok = ();
    type Error = Unencodable;

    fn serialize_field<T: ?Sized + Serialize>(&mut self, key: &'static str, value: &T) -> Result<(), Unencodable> {
        let value = value.serialize(Scalar)?;
        let out = &mut *self.out;
        match (key, value) {
            ("op", Value::Name(name)) => {
                let letter = OPS.iter().find(|(_, n)| *n == name).ok_or_else(|| unsupported(name))?.0;
                out.write_char(letter)?;
            }
            ("region", Value::Text(name)) => {
                out.write_char('r')?;
                escaped(out, &name)?;
            }
            ("overlap", Value::Flag(true)) => out.write_char('*')?,
            (key, value) => {
                match (NUMBERS.iter().find(|(k, _)| *k == key), ENUMS.iter().find(|(k, _)| *k == key), value) {
                    (Some(&(_, letter)), _, Value::Number(n)) => write!(out, "{letter}{n}")?,
                    (_, Some((_, values)), Value::Name(name)) => {
                        let letter = values.iter().find(|(_, n)| *n == name).ok_or_else(|| unsupported(name))?.0;
                        out.write_char(letter)?;
                    }
                    (_, _, value) => extension(out, key, value)?,
                }
            }
        }
        Ok(())
    }

    fn end(self) -> Result<(), Unencodable> {
        Ok(())
    }
}

/// A field without a letter: `;name:12` (integer), `;name=text` (text or enum value), `;name`
/// (true); false is written as nothing, as plan.json leaves false flags out.
fn extension(out: &mut dyn Write, key: &str, value: Value) -> fmt::Result {
    match value {
        Value::Flag(false) | Value::Absent => Ok(()),
        Value::Flag(true) => write!(out, ";{key}"),
        Value::Number(n) => write!(out, ";{key}:{n}"),
        Value::Range(lo, hi) => write!(out, ";{key}:{lo}-{hi}"),
        Value::Text(t) => {
            write!(out, ";{key}=")?;
            escaped(out, &t)
        }
        Value::Name(t) => {
            write!(out, ";{key}=")?;
            escaped(out, t)
        }
    }
}

/// One field's value as the token grammar sees it.
enum Value {
    Absent,
    Flag(bool),
    Number(i128),
    /// Two non-negative integers: `lo-hi`.
    Range(i128, i128),
    Text(String),
    Name(&'static str),
}

struct Scalar;

macro_rules! numbers {
    ($($method:ident: $ty:ty),*) => {
        $(fn $method(self, v: $ty) -> Result<Value, Unencodable> {
            Ok(Value::Number(i128::from(v)))
        })*
    };
}

impl ser::Serializer for Scalar {
    type Ok = Value;
    type Error = Unencodable;
    type SerializeSeq = Impossible<Value, Unencodable>;
    type SerializeTuple = Pair;
    type SerializeTupleStruct = Impossible<Value, Unencodable>;
    type SerializeTupleVariant = Impossible<Value, Unencodable>;
    type SerializeMap = Impossible<Value, Unencodable>;
    type SerializeStruct = Impossible<Value, Unencodable>;
    type SerializeStructVariant = Impossible<Value, Unencodable>;

    numbers!(serialize_i8: i8, serialize_i16: i16, serialize_i32: i32, serialize_i64: i64,
             serialize_u8: u8, serialize_u16: u16, serialize_u32: u32, serialize_u64: u64);

    fn serialize_bool(self, v: bool) -> Result<Value, Unencodable> {
        Ok(Value::Flag(v))
    }
    fn serialize_f32(self, _: f32) -> Result<Value, Unencodable> {
        Err(unsupported("float"))
    }
    fn serialize_f64(self, _: f64) -> Result<Value, Unencodable> {
        Err(unsupported("float"))
    }
    fn serialize_char(self, v: char) -> Result<Value, Unencodable> {
        Ok(Value::Text(v.to_string()))
    }
    fn serialize_str(self, v: &str) -> Result<Value, Unencodable> {
        Ok(Value::Text(v.to_string()))
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<Value, Unencodable> {
        Err(unsupported("byte"))
    }
    fn serialize_none(self) -> Result<Value, Unencodable> {
        Ok(Value::Absent)
    }
    fn serialize_some<T: ?Sized + Serialize>(self, v: &T) -> Result<Value, Unencodable> {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Result<Value, Unencodable> {
        Ok(Value::Absent)
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<Value, Unencodable> {
        Ok(Value::Absent)
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Result<Value, Unencodable> {
        Ok(Value::Name(variant))
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(self, _: &'static str, v: &T) -> Result<Value, Unencodable> {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<Value, Unencodable> {
        Err(unsupported("newtype variant"))
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct, Unencodable> {
        Err(unsupported("struct"))
    }
    fn serialize_tuple(self, len: usize) -> Result<Pair, Unencodable> {
        if len == 2 { Ok(Pair(Vec::with_capacity(2))) } else { Err(unsupported("list")) }
    }
    no_compound_values!();
}

/// A pair of integers (an `images` range), written `lo-hi`.
struct Pair(Vec<i128>);

impl ser::SerializeTuple for Pair {
    type Ok = Value;
    type Error = Unencodable;

    fn serialize_element<T: ?Sized + Serialize>(&mut self, v: &T) -> Result<(), Unencodable> {
        match v.serialize(Scalar)? {
            Value::Number(n) if n >= 0 => {
                self.0.push(n);
                Ok(())
            }
            _ => Err(unsupported("list")),
        }
    }

    fn end(self) -> Result<Value, Unencodable> {
        Ok(Value::Range(self.0[0], self.0[1]))
    }
}

/// Reads a compact plan back into the IR: tokens become plan.json's instruction objects and go
/// through `Instr`'s derived `Deserialize`, so extensions land in the fields they came from.
pub fn read(text: &str) -> Result<PlanIr, String> {
    let mut plan: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    if plan["format"] != FORMAT {
        return Err(format!("not a compact plan: `format` is not `{FORMAT}`"));
    }
    if plan["version"].as_u64() != Some(u64::from(VERSION)) {
        return Err(format!("compact plan version {} is not {VERSION}", plan["version"]));
    }
    plan["format"] = super::FORMAT.into();
    plan["version"] = super::VERSION.into();
    for rank in plan["ranks"].as_array_mut().ok_or("`ranks` is not a list")? {
        let code = rank["code"].as_str().ok_or("a rank has no `code` string")?;
        let instructions = tokens(code)?;
        if rank["count"].as_u64() != Some(instructions.len() as u64) {
            return Err(format!("rank {} holds {} tokens, not its `count`", rank["rank"], instructions.len()));
        }
        let prologue: Vec<serde_json::Value> = match rank.get("prologue") {
            Some(code) => tokens(code.as_str().ok_or("a rank's `prologue` is not a string")?)?,
            None => Vec::new(),
        };
        let object = rank.as_object_mut().ok_or("a rank is not an object")?;
        object.remove("code");
        object.remove("count");
        object.insert("prologue".into(), prologue.into());
        object.insert("instructions".into(), instructions.into());
    }
    serde_json::from_value(plan).map_err(|e| format!("not an IR: {e}"))
}

/// A token string's instructions as plan.json's objects.
fn tokens(code: &str) -> Result<Vec<serde_json::Value>, String> {
    code.split(' ').filter(|t| !t.is_empty()).map(decode).collect()
}

fn unescape(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut k = 0;
    while k < bytes.len() {
        if bytes[k] == b'%' {
            let hex = text.get(k + 1..k + 3).ok_or_else(|| format!("`{text}` ends inside an escape"))?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| format!("`%{hex}` is not an escape"))?);
            k += 3;
        } else {
            out.push(bytes[k]);
            k += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("`{text}` is not UTF-8"))
}

/// One token as plan.json's instruction object.
fn decode(token: &str) -> Result<serde_json::Value, String> {
    let bad = || format!("`{token}` is not an instruction token");
    let (body, extensions) = token.split_once(';').map_or((token, None), |(b, e)| (b, Some(e)));
    let mut chars = body.char_indices().peekable();
    let (_, letter) = chars.next().ok_or_else(bad)?;
    let op = OPS.iter().find(|(l, _)| *l == letter).ok_or_else(bad)?.1;
    let mut fields = serde_json::Map::new();
    fields.insert("op".into(), op.into());
    while let Some((at, c)) = chars.next() {
        if let Some((key, _)) = NUMBERS.iter().find(|(_, l)| *l == c) {
            let mut end = at + 1;
            while chars.next_if(|(_, d)| d.is_ascii_digit()).is_some() {
                end += 1;
            }
            let n: u64 = body[at + 1..end].parse().map_err(|_| bad())?;
            fields.insert((*key).into(), n.into());
        } else if let Some((key, name)) =
            ENUMS.iter().find_map(|(k, vs)| vs.iter().find(|(l, _)| *l == c).map(|(_, n)| (*k, *n)))
        {
            fields.insert(key.into(), name.into());
        } else if c == '*' {
            fields.insert("overlap".into(), true.into());
        } else if c == 'r' {
            let rest = &body[at + 1..];
            let name = rest.split('*').next().unwrap_or("");
            fields.insert("region".into(), unescape(name)?.into());
            for _ in 0..name.len() {
                chars.next();
            }
        } else {
            return Err(bad());
        }
    }
    for ext in extensions.into_iter().flat_map(|e| e.split(';')) {
        let (key, value) = if let Some((k, n)) = ext.split_once(':') {
            let number = |n: &str| n.parse::<i64>().map_err(|_| bad());
            match n.split_once('-') {
                Some((lo, hi)) if !lo.is_empty() => (k, serde_json::json!([number(lo)?, number(hi)?])),
                _ => (k, serde_json::Value::from(number(n)?)),
            }
        } else if let Some((k, t)) = ext.split_once('=') {
            (k, unescape(t)?.into())
        } else {
            (ext, true.into())
        };
        fields.insert(key.into(), value);
    }
    Ok(fields.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Dir, Group, Op};

    fn token(i: &Instr) -> String {
        let mut s = String::new();
        i.serialize(Token { out: &mut s }).unwrap();
        s
    }

    #[test]
    fn tokens_of_each_kind() {
        assert_eq!(token(&Instr::compute(Op::Forward, 3, 17)), "Fs3m17");
        assert_eq!(token(&Instr::comm(Op::Send, Dir::Act, 3, 17, 2)), "Ss3m17p2a");
        assert_eq!(token(&Instr::comm(Op::Recv, Dir::Grad, 0, 1, 4)), "Rs0m1p4g");
        assert_eq!(token(&Instr::all_reduce(Group::Pp, "vision enc")), "APrvision%20enc");
        assert_eq!(token(&Instr::optimizer_step()), "O");
        let overlapped = Instr { overlap: true, ..Instr::compute(Op::BackwardWeight, 1, 2) };
        assert_eq!(token(&overlapped), "Ws1m2*");
    }

    #[test]
    fn every_op_has_a_letter() {
        let ops = [
            Op::Forward,
            Op::Backward,
            Op::BackwardInput,
            Op::BackwardWeight,
            Op::Send,
            Op::Recv,
            Op::AllReduce,
            Op::OptimizerStep,
        ];
        for op in ops {
            // No wildcard: an op added to the IR fails to compile here until it has a letter.
            match op {
                Op::Forward
                | Op::Backward
                | Op::BackwardInput
                | Op::BackwardWeight
                | Op::Send
                | Op::Recv
                | Op::AllReduce
                | Op::OptimizerStep => {}
            }
            let i = Instr { op, ..Instr::optimizer_step() };
            assert_eq!(decode(&token(&i)).unwrap()["op"], op.name());
        }
    }

    #[test]
    fn extensions_read_back_into_their_fields() {
        let fields = decode("Fs1m2;step:1;tag=a%3Bb;late;images:2-4").unwrap();
        assert_eq!(fields["step"], 1);
        assert_eq!(fields["images"], serde_json::json!([2, 4]));
        let part = Instr { images: Some([2, 4]), ..Instr::compute(Op::Forward, 1, 2) };
        assert_eq!(token(&part), "Fs1m2;images:2-4");
        assert_eq!(fields["tag"], "a;b");
        assert_eq!(fields["late"], true);
        let mut out = String::new();
        extension(&mut out, "step", Value::Number(-3)).unwrap();
        extension(&mut out, "tag", Value::Text("a;b".into())).unwrap();
        extension(&mut out, "late", Value::Flag(true)).unwrap();
        extension(&mut out, "early", Value::Flag(false)).unwrap();
        assert_eq!(out, ";step:-3;tag=a%3Bb;late");
    }

    #[test]
    fn malformed_tokens_are_errors() {
        for bad in ["", "X", "Fq1", "Fs", "Fs1;n:x", "APr%2"] {
            assert!(decode(bad).is_err(), "{bad}");
        }
    }
}
