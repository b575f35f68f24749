//! A worker's name, as Triton names a model's instances: `<group>_<n>`,
//! the `n`th of its instance group.

/// Worker `instance`'s name among the instance groups `groups` (Triton's
/// JSON), as Triton numbers them: the groups' instances in order.
pub(super) fn instance_name(
    groups: Option<&serde_json::Value>,
    model: &str,
    instance: usize,
) -> String {
    let mut left = instance;
    for group in groups.and_then(|g| g.as_array()).into_iter().flatten() {
        let count = group
            .get("count")
            .and_then(|c| c.as_u64())
            .map_or(1, |c| c.max(1)) as usize;
        if left < count {
            let name = group.get("name").and_then(|n| n.as_str()).unwrap_or(model);
            return format!("{name}_{left}");
        }
        left -= count;
    }
    format!("{model}_0_{instance}")
}

#[cfg(test)]
mod instance_names {
    use super::instance_name;

    /// Triton 2.51's names, read from the real server: no instance group
    /// (it adds one named as the model), two unnamed instances and a named
    /// group (`tests/test_triton_peer_python.py` compares them live).
    #[test]
    fn instances_are_named_as_triton_names_them() {
        let one = serde_json::json!([{"name": "ia", "count": 1}]);
        assert_eq!(instance_name(Some(&one), "ia", 0), "ia_0");
        let groups =
            serde_json::json!([{"name": "ia2_0", "count": 2}, {"name": "named", "count": 1}]);
        let names: Vec<String> = (0..3)
            .map(|i| instance_name(Some(&groups), "ia2", i))
            .collect();
        assert_eq!(names, ["ia2_0_0", "ia2_0_1", "named_0"]);
    }
}
