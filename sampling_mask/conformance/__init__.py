"""Conformance suite: vectors, runner and hypothesis strategies for implementations of spec v1.

Modules (conformance/README.md is the implementer's guide):

- :mod:`.suite` finds and loads the vectors (``conformance/v1``, shipped as ``vectors/``);
- :mod:`.protocol` the JSON request / response protocol, Python and ``--command`` implementations;
- :mod:`.reference` this library as an implementation (and ``python -m`` serves it);
- :mod:`.runner` runs cases, judges answers, reports per conformance class (``sampling-mask conformance``);
- :mod:`.generated` ``--generated N``: drawn and mutated payloads compared with the reference;
- :mod:`.declarations` what encoded bytes declare (first key, id_order, layout, detected encoding);
- :mod:`.payloads` the suite's JSON spellings of arrays and masks;
- :mod:`.strategies` hypothesis strategies; :mod:`.properties` property checks over the protocol;
- :mod:`.lint` checks the suite itself (the vectors' source, ``tools/conformance/generate.py``, is a
  maintainer tool of the source checkout);
- ``test_suite.py`` is what ``pytest --pyargs sampling_mask.conformance`` runs.

Importing this package needs numpy only (hypothesis for the strategies, jsonschema for the lint).
"""
