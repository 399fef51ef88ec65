# Source from the repo root on the GPU machine (with .whl carried; see shared/tools/gpu-wheels.sh):
#   source benchmarks/gpu_setup.sh
# Installs the wheels the image lacks into /tmp/site and puts them and the repo on PYTHONPATH
# (no `pip install -e .`: the machine cannot fetch build dependencies).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
