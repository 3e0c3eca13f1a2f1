"""One module per op. Each defines `OP = Op(...)`: its argument block, compile-time dimensions,
variants (template families with tile grids) and a numpy reference with random test cases."""
