import dataclasses
import json

import pytest

from neuralbake.bakes.neural_texture import NeuralTextureConfig
from neuralbake.core.config import config_from_dict, config_to_dict, field_docs, load_config
from neuralbake.errors import ConfigError
from neuralbake.nn.mlp import CoordinateNetworkConfig, MLPConfig
from neuralbake.nn.trainer import TrainerConfig

CONFIGS = [NeuralTextureConfig, TrainerConfig, CoordinateNetworkConfig, MLPConfig]


@pytest.mark.parametrize("cls", CONFIGS)
def test_every_field_has_a_docstring(cls):
    docs = field_docs(cls)
    missing = [f.name for f in dataclasses.fields(cls) if not docs.get(f.name)]
    assert not missing, f"{cls.__name__} fields without docstring: {missing}"


def test_round_trip_through_dict():
    config = NeuralTextureConfig(image="a.png", texture_size=(32, 16))
    config.train.steps = 7
    config.network.hidden = 8
    again = config_from_dict(NeuralTextureConfig, json.loads(json.dumps(config_to_dict(config))))
    assert again == config


def test_unknown_and_mistyped_keys(tmp_path):
    with pytest.raises(ConfigError, match="unknown key train.stepz") as info:
        config_from_dict(NeuralTextureConfig, {"train": {"stepz": 3}}, source="cfg.json")
    assert "cfg.json" in str(info.value) and "steps" in str(info.value)
    with pytest.raises(ConfigError, match="expected an integer"):
        config_from_dict(NeuralTextureConfig, {"train": {"steps": "many"}})
    with pytest.raises(ConfigError, match="not one of"):
        config_from_dict(NeuralTextureConfig, {"transform": "rotate"})


def test_toml_file(tmp_path):
    path = tmp_path / "bake.toml"
    path.write_text('transform = "zoom"\ntexture_size = [64, 32]\n[train]\nsteps = 12\nprecision = "bf16"\n[network]\nhidden = 32\n')
    config = load_config(NeuralTextureConfig, path)
    assert config.transform == "zoom" and config.texture_size == (64, 32)
    assert config.train.steps == 12 and config.train.precision == "bf16" and config.network.hidden == 32
    path.write_text("steps = = 3")
    with pytest.raises(ConfigError, match="cannot be parsed"):
        load_config(NeuralTextureConfig, path)


def test_validation_errors_name_the_field():
    config = NeuralTextureConfig(image="a.png")
    config.train.steps = 0
    with pytest.raises(ConfigError, match="steps"):
        config.validate()
    config = NeuralTextureConfig(image="a.png", batch_size=0)
    with pytest.raises(ConfigError, match="batch_size"):
        config.validate()
    config = NeuralTextureConfig(image="a.png")
    config.network.hidden_activation = "swish"
    with pytest.raises(ConfigError, match="hidden_activation"):
        config.validate()


def test_one_value_of_a_list_field_is_a_one_item_list(tmp_path):
    from neuralbake.bakes.ntc import NTCConfig

    path = tmp_path / "ntc.json"
    path.write_text(json.dumps({"bpp": 4, "sources": "albedo.png"}))
    config = load_config(NTCConfig, path)
    assert config.bpp == [4.0] and config.sources == ["albedo.png"]
    with pytest.raises(ConfigError) as caught:  # a table is no list item: the hint shows the field's item type
        config_from_dict(NTCConfig, {"bpp": {"a": 1}})
    assert "bpp" in str(caught.value) and "[0.5]" in str(caught.value) and "512" not in str(caught.value)


def test_a_fixed_size_list_still_needs_all_its_items():
    @dataclasses.dataclass
    class Sized:
        size: tuple[int, int] = (8, 8)
        """Width and height."""

    assert config_from_dict(Sized, {"size": [4, 2]}).size == (4, 2)
    with pytest.raises(ConfigError) as caught:
        config_from_dict(Sized, {"size": 4})
    assert "size" in str(caught.value) and "[512, 512]" in str(caught.value)


def test_a_nested_table_keeps_the_bakes_own_defaults_for_what_it_leaves_out():
    from neuralbake.bakes.material_pack import MaterialPackConfig
    from neuralbake.bakes.neural_material import NeuralMaterialConfig

    own = NeuralMaterialConfig().train
    assert (own.learning_rate, own.precision) != (TrainerConfig().learning_rate, TrainerConfig().precision)  # else this proves nothing
    config = config_from_dict(NeuralMaterialConfig, {"train": {"steps": 5}})
    assert config.train.steps == 5 and (config.train.learning_rate, config.train.precision) == (own.learning_rate, own.precision)
    pack = config_from_dict(MaterialPackConfig, {"bake": {"train": {"seed": 3}}})
    assert pack.bake.train.seed == 3 and pack.bake.train.learning_rate == own.learning_rate
    with pytest.raises(ConfigError, match=r"bake\.train\.stepz"):
        config_from_dict(MaterialPackConfig, {"bake": {"train": {"stepz": 3}}})
