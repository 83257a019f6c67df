set -x
S=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl .whl/deps/*.whl || exit 3
tar -xJf .whl/ray_trim.tar.xz -C /tmp/site || exit 4
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 60 bash .gpucheck/mps_mem.sh > $OUT/mps_mem.log 2>&1; echo "mps_mem rc=$?"
cat $OUT/mps_mem.log
# the smallest limit that ran, in MB (the client's own tensors are a few MB)
CTX=$(grep ' ok ' $OUT/mps_mem.log | grep 'dev=uuid' | grep -v none | sed 's/limit=\([0-9]*\)M.*/\1/' | sort -n | head -1)
echo "smallest limit that ran: ${CTX} MB"; [ -n "$CTX" ] || CTX=1024
timeout 90 python3 .gpucheck/ray_mps.py /tmp/rs .gpucheck/mps_job.py > $OUT/ray_mps.log 2>&1; echo "ray_mps rc=$?"
grep -a "service ran\|^job \|MPS processes\|ray initialized\|num_gpus=0" $OUT/ray_mps.log
pkill -9 -f nvidia-cuda-mps; pkill -9 -f raylet; pkill -9 -f gcs_server; true
mkdir -p /tmp/g
timeout 150 python3 -m gpusched.real.cli profile scenario=.gpucheck/real_gpu1.yaml devices.kind=nvidia out_dir=/tmp/g/profile > $OUT/compare.log 2>&1; echo "profile rc=$?"
python3 .gpucheck/scale.py /tmp/g/profile/models.json /tmp/g/real_gpu1.yaml >> $OUT/compare.log 2>&1
cp /tmp/g/real_gpu1.yaml $OUT/
for i in 1 2; do
  [ $(( $(date +%s) - S )) -lt 330 ] || break
  timeout 140 python3 -m gpusched.real.cli compare scenario=/tmp/g/real_gpu1.yaml devices.kind=nvidia profile_dir=/tmp/g/profile real.mps_context_mb=$CTX out_dir=/tmp/g/cmp$i >> $OUT/compare.log 2>&1; echo "compare$i rc=$?"
done
grep -v "^  File\|^    " $OUT/compare.log | tail -40
tar czf $OUT/files.tgz --exclude='*.pt' /tmp/g /tmp/rs/jobs /tmp/rs/svc/nodes /tmp/mm 2>/dev/null; ls -la $OUT; echo "elapsed $(( $(date +%s) - S )) s"
