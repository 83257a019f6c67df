# the MPS control commands the service relies on: get_server_list exit status up / after quit / stale socket; quit's time
M=nvidia-cuda-mps-control; d=/tmp/mpschk; rm -rf $d; mkdir -p $d/pipe $d/log
export CUDA_MPS_PIPE_DIRECTORY=$d/pipe CUDA_MPS_LOG_DIRECTORY=$d/log
which $M; $M -d; echo "start rc=$?"; sleep 1
echo get_server_list | $M; echo "get_server_list (up, no server yet) rc=$?"
python3 -c "import torch; x=torch.ones(10,device='cuda'); print('client ok', x.sum().item())"; echo "client rc=$?"
echo get_server_list | $M; echo "get_server_list (after a client) rc=$?"
s=$(date +%s.%N); echo quit | $M; echo "quit rc=$? took $(echo "$(date +%s.%N) - $s" | bc) s"; sleep 1
echo get_server_list | timeout 10 $M; echo "get_server_list (after quit) rc=$?"
ls -la $d/pipe
$M -d; sleep 1; pkill -9 -f "$M -d"; sleep 0.5; ls -la $d/pipe
echo get_server_list | timeout 10 $M; echo "get_server_list (stale socket) rc=$?"
pkill -9 -f nvidia-cuda-mps; true
