//! Edits of the top-level keys of a JSON object body, shared by `request-transformer` (string
//! values) and `response-transformer` (values typed by `json_types`).

use serde_json::{Map, Value};

/// Edits of a JSON object's top-level keys, in Kong's order.
#[derive(Debug, Default)]
pub(super) struct JsonOps {
    /// Keys removed.
    pub remove: Vec<String>,
    /// Keys renamed (`old`, `new`), when `old` is there.
    pub rename: Vec<(String, String)>,
    /// Values replaced, when the key is there.
    pub replace: Vec<(String, Value)>,
    /// Keys added, when not there.
    pub add: Vec<(String, Value)>,
    /// Values appended: the key becomes an array holding its old value(s) and this one.
    pub append: Vec<(String, Value)>,
}

impl JsonOps {
    /// Whether there is nothing to do (bodies are then never read).
    pub fn is_empty(&self) -> bool {
        self.remove.is_empty()
            && self.rename.is_empty()
            && self.replace.is_empty()
            && self.add.is_empty()
            && self.append.is_empty()
    }

    /// The edited body, or `None` when `body` is not a JSON object or nothing changed (the body
    /// then goes on byte for byte). With `empty_is_object` an empty body counts as `{}`, as in
    /// Kong's request-transformer, so `add` and `append` can create one.
    pub fn apply(&self, body: &[u8], empty_is_object: bool) -> Option<Vec<u8>> {
        let mut map = if body.is_empty() && empty_is_object {
            Map::new()
        } else {
            match serde_json::from_slice::<Value>(body) {
                Ok(Value::Object(m)) => m,
                _ => return None,
            }
        };
        if !self.edit(&mut map) {
            return None;
        }
        serde_json::to_vec(&Value::Object(map)).ok()
    }

    /// Applies the edits; says whether anything changed.
    fn edit(&self, map: &mut Map<String, Value>) -> bool {
        let mut changed = false;
        for k in &self.remove {
            changed |= map.remove(k).is_some();
        }
        for (old, new) in &self.rename {
            if old == new {
                continue;
            }
            if let Some(v) = map.remove(old) {
                map.insert(new.clone(), v);
                changed = true;
            }
        }
        for (k, v) in &self.replace {
            if let Some(slot) = map.get_mut(k) {
                *slot = v.clone();
                changed = true;
            }
        }
        for (k, v) in &self.add {
            if !map.contains_key(k) {
                map.insert(k.clone(), v.clone());
                changed = true;
            }
        }
        for (k, v) in &self.append {
            let slot = map.entry(k.clone()).or_insert(Value::Null);
            match slot {
                Value::Array(a) => a.push(v.clone()),
                Value::Null => *slot = Value::Array(vec![v.clone()]),
                other => *other = Value::Array(vec![other.take(), v.clone()]),
            }
            changed = true;
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn s(x: &str) -> String {
        x.to_string()
    }

    fn ops() -> JsonOps {
        JsonOps {
            remove: vec![s("secret"), s("absent")],
            rename: vec![(s("old"), s("new")), (s("nothing"), s("else"))],
            replace: vec![(s("status"), json!("replaced")), (s("missing"), json!(1))],
            add: vec![(s("status"), json!("not added")), (s("added"), json!(true))],
            append: vec![
                (s("one"), json!("b")),
                (s("list"), json!(3)),
                (s("fresh"), json!("x")),
                (s("num"), json!(2)),
            ],
        }
    }

    fn run(o: &JsonOps, body: &str, empty_is_object: bool) -> Option<Value> {
        o.apply(body.as_bytes(), empty_is_object)
            .map(|b| serde_json::from_slice(&b).unwrap())
    }

    #[test]
    fn edits_run_in_kongs_order() {
        let body = r#"{"secret":1,"old":{"a":1},"new":"gone","status":"ok","one":"a","list":[1,2],"num":1,"keep":null}"#;
        assert_eq!(
            run(&ops(), body, false).unwrap(),
            json!({
                "new": {"a": 1},
                "status": "replaced",
                "added": true,
                "one": ["a", "b"],
                "list": [1, 2, 3],
                "fresh": ["x"],
                "num": [1, 2],
                "keep": null,
            })
        );
    }

    #[test]
    fn anything_but_an_object_passes_unchanged() {
        for body in ["[1,2]", "\"text\"", "{\"a\":", "not json", "", " "] {
            assert_eq!(run(&ops(), body, false), None, "{body:?}");
        }
        // Kong's request-transformer builds an object from an empty body.
        assert_eq!(
            run(&ops(), "", true).unwrap(),
            json!({"added": true, "status": "not added", "one": ["b"], "list": [3], "fresh": ["x"], "num": [2]})
        );
    }

    #[test]
    fn nothing_to_change_leaves_the_body_alone() {
        let o = JsonOps {
            remove: vec![s("absent")],
            rename: vec![(s("x"), s("y"))],
            replace: vec![(s("z"), json!(1))],
            ..JsonOps::default()
        };
        assert_eq!(run(&o, r#"{"a": 1}"#, false), None);
        assert_eq!(run(&o, "", true), None);
        assert!(o.apply(b"{}", false).is_none());
        assert!(!o.is_empty() && JsonOps::default().is_empty());
    }
}
