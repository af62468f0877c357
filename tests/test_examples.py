"""runkit.examples, the registry the entry points and the GPU scripts read: every shipped config is
listed, under the task selector its YAML uses, and each example's defaults name its own data."""

import yaml

from conftest import REPO
from runkit.examples import CONFIGS, EXAMPLES


def test_every_shipped_config_is_listed_under_the_task_selector_it_uses():
    assert set(CONFIGS) == {path.name for path in (REPO / "configs").glob("*.yaml")}
    for name, (example, selector) in CONFIGS.items():
        taskset = yaml.safe_load(example.config_path(selector).read_text())["buffer"]["explorer_input"]["taskset"]
        used = taskset.get("data_selector", {}).get("selector_type", "random")  # Trinity's default: random
        assert used.startswith("difficulty_based") == (selector == "difficulty"), f"{name}: {used}"


def test_each_examples_default_data_is_where_its_configs_read_it():
    for example in EXAMPLES.values():
        for selector in example.configs:
            inputs = yaml.safe_load(example.config_path(selector).read_text())["buffer"]["explorer_input"]
            assert inputs["taskset"]["path"] == example.data["train"]
            assert inputs["eval_tasksets"][0]["path"] == example.data["eval"]
