"""rftkit.keys: the one way a dotted key path is followed through a config, and every key the project names."""

import pytest

from rftkit import keys

CONFIG = {"buffer": {"batch_size": 4, "eval_tasksets": [{"name": "aime"}], "empty": None}}


@pytest.mark.parametrize("dotted,present,value", [
    ("buffer.batch_size", True, 4),
    ("buffer.eval_tasksets.0.name", True, "aime"),
    ("buffer.empty", True, None),  # set to null: there, and None
    ("buffer.eval_tasksets.1.name", False, "default"),
    ("buffer.batch_size.x", False, "default"),
    ("buffer.eval_tasksets.name", False, "default"),
    ("model", False, "default"),
])
def test_get_and_has_follow_mappings_and_list_items(dotted, present, value):
    assert keys.has(CONFIG, dotted) is present
    assert keys.get(CONFIG, dotted, "default") == value


def test_put_makes_the_mappings_it_lacks_and_writes_list_items():
    config = {"buffer": {"eval_tasksets": [{"name": "aime"}]}}
    keys.put(config, "trainer.trainer_config.model.use_liger", True)
    keys.put(config, "buffer.eval_tasksets.0.name", "gsm")
    assert config == {"buffer": {"eval_tasksets": [{"name": "gsm"}]},
                      "trainer": {"trainer_config": {"model": {"use_liger": True}}}}


@pytest.mark.parametrize("dotted,where", [
    ("buffer.eval_tasksets.3.name", "the config's buffer.eval_tasksets is a list of 1, items 0 to 0"),
    ("buffer.eval_tasksets.x", "the config's buffer.eval_tasksets is a list: 'x' is not an item's number"),
    ("buffer.batch_size.x", "the config's buffer.batch_size is int, not a mapping"),
    ("buffer.tasks.0", "the config's buffer.tasks is not a list"),
    ("trainer.new.2.x", "the config's trainer.new is not a list"),
    ("buffer.batch_size", None),  # a value where one was: replaced
])
def test_put_refuses_a_path_it_cannot_write_saying_where_it_stops(dotted, where):
    config = {"buffer": {"batch_size": 4, "eval_tasksets": [{"name": "aime"}]}}
    if where is None:
        keys.put(config, dotted, 8)
        assert config["buffer"]["batch_size"] == 8
        return
    with pytest.raises(keys.KeyPathError) as error:
        keys.put(config, dotted, 1)
    assert str(error.value) == where
    assert config == {"buffer": {"batch_size": 4, "eval_tasksets": [{"name": "aime"}]}}, "nothing half-written"


def test_every_key_the_project_names_is_a_place_in_trinitys_config():
    from rftkit.inputs.config_keys import check_set_key

    named = {name: value for name, value in vars(keys).items() if name.endswith("_KEY")}
    assert "ATTN_KEY" in named and len(set(named.values())) == len(named), "one name per key"
    for name, dotted in named.items():
        check_set_key(dotted, name)  # raises naming the key if Trinity's config has no place for it
