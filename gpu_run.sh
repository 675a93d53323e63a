python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src
mkdir -p ../shared/assets && cp -r .assets/DamagedHelmet ../shared/assets/
B="timeout 575 python3 bench/ntc_convergence.py --device cuda --out $OUT/conv.jsonl"
R="timeout 575 python3 gpu_rd.py"
CUDA_VISIBLE_DEVICES=0 $B --sets helmet --steps 150000 > /tmp/l0a 2>&1 &
CUDA_VISIBLE_DEVICES=0 $B --sets helmet --steps default --variant s1:train.seed=1 > /tmp/l0b 2>&1 &
CUDA_VISIBLE_DEVICES=1 $B --sets crate --steps 150000 > /tmp/l1a 2>&1 &
CUDA_VISIBLE_DEVICES=1 $B --sets crate --steps default > /tmp/l1b 2>&1 &
CUDA_VISIBLE_DEVICES=1 $B --sets helmet --steps default --variant clip2:weight_clip=2 > /tmp/l1c 2>&1 &
CUDA_VISIBLE_DEVICES=2 $R 1 > /tmp/l2a 2>&1 &
CUDA_VISIBLE_DEVICES=2 $R 2 > /tmp/l2b 2>&1 &
CUDA_VISIBLE_DEVICES=2 $R 4 > /tmp/l2c 2>&1 &
CUDA_VISIBLE_DEVICES=3 $R 8 > /tmp/l3a 2>&1 &
CUDA_VISIBLE_DEVICES=3 $R 16 > /tmp/l3b 2>&1 &
CUDA_VISIBLE_DEVICES=3 $B --sets crate --steps default --variant s1:train.seed=1 > /tmp/l3c 2>&1 &
wait
for f in /tmp/l*; do echo "== $f"; grep -v '^{' $f | tail -n 6; done
