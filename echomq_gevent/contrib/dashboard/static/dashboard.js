// The dashboard's only script, inlined in every page under its nonce: while a queue's
// page is open it polls the counts and the throughput series (<body data-poll>) every
// 5 s and redraws the tabs' counts and the chart. Everything it writes goes through
// textContent or setAttribute, never as HTML.
(function(){
  var url=document.body.getAttribute('data-poll');
  function draw(svg,t){
    var w=+svg.getAttribute('width'),hh=+svg.getAttribute('height');
    var peak=Math.max.apply(null,[1].concat(t.completed,t.failed));
    while(svg.firstChild){svg.removeChild(svg.firstChild);}
    ['completed','failed'].forEach(function(k){
      var v=t[k];if(v.length<2){return;}
      var pts=v.map(function(x,i){return (i*w/(v.length-1)).toFixed(1)+','+(hh-2-x/peak*(hh-4)).toFixed(1);});
      var p=document.createElementNS('http://www.w3.org/2000/svg','polyline');
      p.setAttribute('class',k);p.setAttribute('points',pts.join(' '));svg.appendChild(p);
    });
    var pk=svg.parentNode.querySelector('.peak');if(pk){pk.textContent=String(peak);}
  }
  if(!url){return;}
  function tick(){
    var x=new XMLHttpRequest();x.open('GET',url);
    x.onload=function(){
      if(x.status!==200){return;}
      var d=JSON.parse(x.responseText);
      Array.prototype.forEach.call(document.querySelectorAll('[data-count]'),function(el){
        var s=el.getAttribute('data-count');if(s in d.counts){el.textContent=String(d.counts[s]);}
      });
      var svg=document.querySelector('.chart svg');if(svg){draw(svg,d.throughput);}
    };
    x.send();
  }
  setInterval(tick,5000);
})();
